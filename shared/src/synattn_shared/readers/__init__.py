"""Readers that turn treebank files and parser output into ``SentenceRecord`` values."""

from synattn_shared.readers.conllu_reader import read_conllu
from synattn_shared.readers.ptb import read_ptb
from synattn_shared.readers.spacy_doc import record_from_doc

__all__ = ["read_conllu", "read_ptb", "record_from_doc"]
