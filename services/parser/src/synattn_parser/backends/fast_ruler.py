"""spaCy's attribute ruler with its matching done by lookups: the same matches, a fraction of
the time.

English pipelines end with an ``attribute_ruler`` that maps tags to POS and morphology. Its
``Matcher`` tries every pattern at every token: 0.15-0.2 ms a sentence, 15-20% of parsing,
though almost every pattern is one token with equality tests (``{"TAG": "NN"}``, ``{"LOWER":
"gon", "TAG": "VBG"}``). ``compile_ruler`` replaces the ruler's ``match`` with one that finds
those through dictionaries keyed by tag, lowercase form or text, and leaves the other patterns
(several tokens, regular expressions, operators) to a ``Matcher`` of their own. It returns the
list spaCy's ``match`` returns (pattern order, then position), and spaCy's own
``set_annotations`` applies it, so the attributes set are the same.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

UNREAD_ATTRS = frozenset({"LEMMA", "MORPH"})  # token attributes no SentenceRecord reads
Match = tuple[int, int, int, int]  # (pattern number, match id, start, end), as spaCy sorts them
# token attributes a one-token pattern may test by equality here, and how to read them
READERS: dict[str, Callable[[Any], object]] = {
    "TAG": lambda t: t.tag_,
    "LOWER": lambda t: t.lower_,
    "ORTH": lambda t: t.orth_,
    "TEXT": lambda t: t.orth_,
    "DEP": lambda t: t.dep_,
    "POS": lambda t: t.pos_,
    "IS_SPACE": lambda t: t.is_space,
    "IS_PUNCT": lambda t: t.is_punct,
}
INDEXED = ("TAG", "LOWER", "ORTH")  # a pattern testing one of these is found by lookup
Test = tuple[Callable[[Any], object], frozenset[object]]  # reader, accepted values


def one_token_tests(pattern: list[dict[str, Any]]) -> dict[str, frozenset[object]] | None:
    """The equality tests of a one-token pattern (attribute -> accepted values), or None when
    the pattern needs the Matcher (several tokens, an operator, a regex, another attribute)."""
    if len(pattern) != 1:
        return None
    tests: dict[str, frozenset[object]] = {}
    for key, value in pattern[0].items():
        attr = str(key).upper()
        if attr not in READERS:
            return None
        if isinstance(value, dict):
            if set(value) != {"IN"} or not isinstance(value["IN"], list):
                return None
            values = value["IN"]
        else:
            values = [value]
        boolean = attr.startswith("IS_")
        if not all(isinstance(v, bool) if boolean else isinstance(v, str) for v in values):
            return None
        tests[attr] = frozenset(values)
    return tests or None


class CompiledMatch:
    """A drop-in for ``AttributeRuler.match``: the ruler's matches on a doc, found by lookups
    for one-token equality patterns and by a Matcher for the rest."""

    def __init__(self, ruler: Any) -> None:
        from spacy.matcher import Matcher

        self.rest = Matcher(ruler.vocab)
        self.keyed: dict[str, dict[object, list[tuple[int, int, list[Test]]]]] = {
            attr: defaultdict(list) for attr in INDEXED
        }
        self.anywhere: list[tuple[int, int, list[Test]]] = []  # no indexed attribute tested
        strings = ruler.vocab.strings
        self.compiled = 0
        for number, entry in enumerate(ruler.patterns):
            match_id = strings.add(str(number))
            for pattern in entry["patterns"]:
                tests = one_token_tests(pattern)
                if tests is None:
                    self.rest.add(match_id, [pattern])
                    continue
                self.compiled += 1
                index_attr = next((a for a in INDEXED if a in tests), None)
                checks = [(READERS[a], v) for a, v in tests.items() if a != index_attr]
                if index_attr is None:
                    self.anywhere.append((number, match_id, checks))
                else:
                    for value in tests[index_attr]:
                        self.keyed[index_attr][value].append((number, match_id, checks))
        self.strings = strings

    def __call__(self, doc: Any) -> list[Match]:
        found: set[Match] = set()
        tag, lower, orth = (self.keyed[a] for a in INDEXED)
        for token in doc:
            i = token.i
            for candidates in (
                tag.get(token.tag_, ()),
                lower.get(token.lower_, ()),
                orth.get(token.orth_, ()),
                self.anywhere,
            ):
                for number, match_id, checks in candidates:
                    if all(read(token) in accepted for read, accepted in checks):
                        found.add((number, match_id, i, i + 1))
        if len(self.rest):
            for match_id, start, end in self.rest(doc, allow_missing=True, as_spans=False):
                found.add((int(self.strings[match_id]), match_id, start, end))
        return sorted(found)


def final_ruler(nlp: Any) -> Any:
    """The pipeline's last component if it is an attribute ruler, else None."""
    if not nlp.pipe_names:
        return None
    last = nlp.pipe_names[-1]
    return nlp.get_pipe(last) if nlp.get_pipe_meta(last).factory == "attribute_ruler" else None


def prune_attribute_ruler(nlp: Any) -> int:
    """Drop the patterns of a final attribute ruler that set only attributes synattn never
    reads (lemma, morphology); returns how many. The parse is unchanged.

    English pipelines end with an ``attribute_ruler`` whose Matcher checks every pattern on
    every token (0.2 ms a sentence, a fifth of parsing); 48 of en_core_web_sm's 179 patterns
    set only ``LEMMA`` or ``MORPH``. Exact: the ruler matches all its patterns before it sets
    anything, and sets in pattern order, so the kept patterns set POS, TAG and DEP as before.
    Only a ruler that is the pipeline's last component is pruned (nothing after it could read
    what the dropped patterns set).
    """
    ruler = final_ruler(nlp)
    if ruler is None:
        return 0
    patterns = ruler.patterns
    keep = [p for p in patterns if not {str(a).upper() for a in p["attrs"]} <= UNREAD_ATTRS]
    if len(keep) < len(patterns):
        ruler.clear()
        ruler.add_patterns(keep)
    return len(patterns) - len(keep)


def compile_ruler(ruler: Any) -> int:
    """Make ``ruler`` (a spaCy ``AttributeRuler``) match through ``CompiledMatch``; returns how
    many of its patterns were compiled to lookups (0: ruler left as it was)."""
    compiled = CompiledMatch(ruler)
    if compiled.compiled:
        ruler.match = compiled
    return compiled.compiled


def speed_up_attribute_ruler(nlp: Any) -> tuple[int, int]:
    """Prune a final attribute ruler to what synattn reads, then compile its one-token
    patterns to lookups; returns (patterns dropped, patterns compiled). Call it once the
    pipeline is complete: patterns added to the ruler later are not seen."""
    ruler = final_ruler(nlp)
    if ruler is None:
        return 0, 0
    return prune_attribute_ruler(nlp), compile_ruler(ruler)
