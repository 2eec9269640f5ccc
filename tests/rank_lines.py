"""The JSON event lines of ``npu-emulate`` runs, with ``--ranks N`` or without."""
import json
import re

_TAGGED = re.compile(r"^\[(\d+)\] (.*)$")


def json_events(stdout):
    """The JSON objects printed one per line. Under ``--ranks`` each line starts with
    ``[<rank>] ``: the tag is removed after checking that it is the rank the event names (events
    carry their ``rank``)."""
    events = []
    for line in stdout.splitlines():
        tagged = _TAGGED.match(line)
        text = tagged.group(2) if tagged else line
        if not text.startswith("{"):
            continue
        event = json.loads(text)
        if tagged:
            assert event.get("rank") == int(tagged.group(1)), line
        events.append(event)
    return events
