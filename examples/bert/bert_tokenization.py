"""A small uncased BERT WordPiece tokenizer, written from the algorithm's description.

Two stages, as BERT's uncased models expect:

1. *Basic tokenization*: drop control characters and invalid code points, turn any whitespace
   into a space, put spaces around CJK ideographs, lowercase, strip accents (NFD, then drop
   combining marks), split on whitespace and then on every punctuation character (each
   punctuation character becomes its own token).
2. *WordPiece*: each basic token is cut greedily into the longest pieces found in the
   vocabulary, left to right; pieces after the first carry the ``##`` prefix. A word that cannot
   be cut completely (or is longer than ``max_chars_per_word``) becomes ``[UNK]`` as a whole.

No dependency beyond the standard library.
"""
import unicodedata

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"


def load_vocab(path):
    """Reads ``vocab.txt`` (one token a line, the line number is the id) into a dict."""
    vocab = {}
    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            token = line.rstrip("\n").rstrip("\r")
            if token and token not in vocab:
                vocab[token] = index
    return vocab


def _is_whitespace(ch):
    if ch in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(ch) == "Zs"


def _is_control(ch):
    if ch in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def _is_punctuation(ch):
    cp = ord(ch)
    # All non-alphanumeric printable ASCII counts as punctuation (e.g. "$", "`", "^"), even
    # where Unicode files it under symbols.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class BasicTokenizer:
    """Cleans, lowercases, strips accents and splits on whitespace and punctuation."""

    def __init__(self, lowercase=True, never_split=(PAD, UNK, CLS, SEP, MASK)):
        self.lowercase = lowercase
        self.never_split = set(never_split)

    def _clean(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_cjk(cp):
                out.extend((" ", ch, " "))
            else:
                out.append(ch)
        return "".join(out)

    @staticmethod
    def _strip_accents(word):
        return "".join(ch for ch in unicodedata.normalize("NFD", word)
                       if unicodedata.category(ch) != "Mn")

    @staticmethod
    def _split_punctuation(word):
        pieces, current = [], []
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(ch)
            else:
                current.append(ch)
        if current:
            pieces.append("".join(current))
        return pieces

    def tokenize(self, text):
        tokens = []
        for word in self._clean(text).split():
            if word in self.never_split:
                tokens.append(word)
                continue
            if self.lowercase:
                word = self._strip_accents(word.lower())
            tokens.extend(self._split_punctuation(word))
        return tokens


class WordPieceTokenizer:
    """Greedy longest-match-first segmentation of one basic token into vocabulary pieces."""

    def __init__(self, vocab, unk_token=UNK, max_chars_per_word=100, prefix="##"):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_chars_per_word = max_chars_per_word
        self.prefix = prefix

    def tokenize_word(self, word):
        if len(word) > self.max_chars_per_word:
            return [self.unk_token]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            found = None
            while end > start:
                candidate = word[start:end]
                if start > 0:
                    candidate = self.prefix + candidate
                if candidate in self.vocab:
                    found = candidate
                    break
                end -= 1
            if found is None:
                return [self.unk_token]
            pieces.append(found)
            start = end
        return pieces


class FullTokenizer:
    """Basic tokenization followed by WordPiece, plus BERT input encoding."""

    def __init__(self, vocab_file, lowercase=True):
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self.basic = BasicTokenizer(lowercase=lowercase)
        self.wordpiece = WordPieceTokenizer(self.vocab)
        for special in (PAD, UNK, CLS, SEP):
            if special not in self.vocab:
                raise ValueError("vocab_file %r has no %s token" % (vocab_file, special))

    def tokenize(self, text):
        pieces = []
        for word in self.basic.tokenize(text):
            pieces.extend(self.wordpiece.tokenize_word(word))
        return pieces

    def convert_tokens_to_ids(self, tokens):
        unk = self.vocab[UNK]
        return [self.vocab.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids):
        return [self.inv_vocab[int(i)] for i in ids]

    def encode(self, text, max_seq_length):
        """Returns ``(input_ids, input_mask, segment_ids)`` for one sentence, each padded to
        ``max_seq_length``: ``[CLS] pieces... [SEP] [PAD]...``; pieces beyond
        ``max_seq_length - 2`` are cut off. Also returns whether it was cut."""
        if max_seq_length < 3:
            raise ValueError("max_seq_length must be >= 3 ([CLS], one piece, [SEP]); got %r"
                             % (max_seq_length,))
        pieces = self.tokenize(text)
        truncated = len(pieces) > max_seq_length - 2
        pieces = pieces[:max_seq_length - 2]
        ids = self.convert_tokens_to_ids([CLS] + pieces + [SEP])
        mask = [1] * len(ids)
        pad = max_seq_length - len(ids)
        ids += [self.vocab[PAD]] * pad
        mask += [0] * pad
        return ids, mask, [0] * max_seq_length, truncated
