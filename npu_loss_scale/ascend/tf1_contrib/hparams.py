"""``tf.contrib.training.HParams``: a hyper-parameter container with TF 1.15's methods."""
import json


class HParams:
    """Named hyper-parameters, as ``tf.contrib.training.HParams`` held them.

    ``HParams(lr=0.1, layers=[2, 3])``; attribute access; ``add_hparam``, ``set_hparam``,
    ``del_hparam``, ``get``, ``values()``, ``override_from_dict``, ``parse("lr=0.2,layers=[4]")``
    (each value converted to the type the parameter has), ``to_json``/``parse_json``.
    """

    def __init__(self, hparam_def=None, model_structure=None, **kwargs):
        if hparam_def is not None:
            raise ValueError("HParams(hparam_def=...) (a protocol buffer) is not emulated; pass "
                             "the parameters as keyword arguments")
        self._names = []
        self._model_structure = model_structure
        for name, value in kwargs.items():
            self.add_hparam(name, value)

    def add_hparam(self, name, value):
        if name in self._names or name.startswith("_") or hasattr(HParams, name):
            raise ValueError("hyper-parameter name %r is taken or reserved" % (name,))
        self._names.append(name)
        setattr(self, name, value)

    def set_hparam(self, name, value):
        if name not in self._names:
            raise ValueError("no hyper-parameter %r; defined: %s" % (name, sorted(self._names)))
        setattr(self, name, value)

    def del_hparam(self, name):
        if name in self._names:
            self._names.remove(name)
            delattr(self, name)

    def get(self, key, default=None):
        return getattr(self, key) if key in self._names else default

    def values(self):
        return {name: getattr(self, name) for name in self._names}

    def override_from_dict(self, values_dict):
        for name, value in values_dict.items():
            self.set_hparam(name, value)
        return self

    @staticmethod
    def _convert(name, text, current):
        text = text.strip()
        if isinstance(current, bool):
            if text.lower() in ("true", "1"):
                return True
            if text.lower() in ("false", "0"):
                return False
            raise ValueError("hyper-parameter %s is a bool; got %r" % (name, text))
        if isinstance(current, (list, tuple)):
            items = [t for t in text.strip("[]").split(":" if ":" in text else ",") if t.strip()]
            kind = type(current[0]) if current else str
            return [HParams._convert(name, t, kind()) for t in items]
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        return text

    def parse(self, values):
        """Overrides from ``"name=value,name=[a,b],..."``; returns self."""
        if not values:
            return self
        pairs, depth, start = [], 0, 0
        for i, char in enumerate(values + ","):
            depth += {"[": 1, "]": -1}.get(char, 0)
            if char == "," and depth == 0:
                if values[start:i].strip():
                    pairs.append(values[start:i])
                start = i + 1
        for pair in pairs:
            if "=" not in pair:
                raise ValueError("HParams.parse: %r is not name=value" % (pair,))
            name, text = pair.split("=", 1)
            name = name.strip()
            if name not in self._names:
                raise ValueError("HParams.parse: no hyper-parameter %r; defined: %s"
                                 % (name, sorted(self._names)))
            self.set_hparam(name, self._convert(name, text, getattr(self, name)))
        return self

    def to_json(self, indent=None, separators=None, sort_keys=False):
        return json.dumps(self.values(), indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def parse_json(self, values_json):
        return self.override_from_dict(json.loads(values_json))

    def __contains__(self, key):
        return key in self._names

    def __repr__(self):
        return "HParams(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.values().items()))


__all__ = ["HParams"]
