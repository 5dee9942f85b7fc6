"""A closed vocabulary (`decode.lexicon`): every word a search spells is a word of a list.

A character model spells what it hears letter by letter, so on a short or unclear input it can
end a word early or start one late ("EIGH" for EIGHT, "INE" for NINE). Where the words that can
be said are known (commands, digits, a domain's terms), the lexicon keeps every hypothesis inside
them: a prefix tree of the words, walked one character per step, gives each row the symbols that
may follow (-inf for the rest), as a scorer beside the speller (las.search.scorers). A word ends
only at a space or at <eos>, and only where a word of the list ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from las.core.errors import LasError
from las.core.files import read_text
from las.core.progress import warn
from las.core.text import Vocabulary, clean_transcript
from las.search.common import Heard, Rules

START, ENDED, AFTER_SPACE = 0, 1, 2  # the prefix tree's fixed nodes; a word's characters follow
ABSENT = -1  # no such edge: the symbol may not come here


@dataclass(frozen=True)
class Lexicon:
    """The prefix tree of the words as a table: `edges[node, symbol]` is the node a symbol leads
    to, or ABSENT. START allows a first character, or <eos> (no words at all); AFTER_SPACE the
    same first characters only; ENDED only <eos> again (a finished row's steps)."""

    edges: torch.Tensor  # (nodes, vocabulary) int32
    words: int

    @classmethod
    def of(cls, words: list[str], vocabulary: Vocabulary, source: str = "the lexicon") -> Lexicon:
        """The tree of `words` that the model can spell; the others are left out with a warning."""
        index, space = vocabulary.index, vocabulary.index.get(" ")
        distinct = {word for word in words if word}
        spellable = sorted(word for word in distinct if all(character in index for character in word))
        if not spellable:
            example = min(distinct, default="")
            lacking = "".join(sorted(vocabulary.unknown_characters(example)))
            raise LasError(
                f"{source}: none of its {len(distinct)} words can be spelled with the model's characters"
                + (f" (e.g. {example!r}: {lacking!r} is not among them)" if example else "")
            )
        if len(spellable) < len(distinct):
            warn(f"{source}: {len(distinct) - len(spellable)} words use characters the model lacks, left out")
        rows: list[dict[int, int]] = [{}, {}, {}]  # START, ENDED, AFTER_SPACE
        rows[START][vocabulary.eos] = ENDED
        rows[ENDED][vocabulary.eos] = ENDED
        for word in spellable:
            node = START
            for character in word:
                row, symbol = rows[node], index[character]
                if symbol not in row:
                    row[symbol] = len(rows)
                    rows.append({})
                node = row[symbol]
            rows[node][vocabulary.eos] = ENDED
            if space is not None:
                rows[node][space] = AFTER_SPACE
        rows[AFTER_SPACE] = {symbol: node for symbol, node in rows[START].items() if symbol != vocabulary.eos}
        triples = torch.tensor(
            [(node, symbol, target) for node, row in enumerate(rows) for symbol, target in row.items()]
        )
        edges = torch.full((len(rows), len(vocabulary)), ABSENT, dtype=torch.int32)
        edges[triples[:, 0], triples[:, 1]] = triples[:, 2].int()
        return cls(edges, len(spellable))


def read_lexicon(path: str | Path, vocabulary: Vocabulary) -> Lexicon:
    """The words of a list, one per line: each line's first field, so that a word list and a
    pronunciation lexicon (`WORD phone phone ...`, as Kaldi's) both serve; blank lines skipped, and
    each word spelled as transcripts are (`clean_transcript`)."""
    lines = read_text(path, "decode.lexicon").splitlines()
    words = [cleaned.split()[0] for line in lines if (cleaned := clean_transcript(line))]
    if not words:
        raise LasError(f"{path}: no words (decode.lexicon lists one word per line)")
    return Lexicon.of(words, vocabulary, str(path))


class Walk(NamedTuple):
    """Per row: where its prefix is in the tree, and how long it may grow."""

    nodes: torch.Tensor  # (rows,) int32
    length: torch.Tensor  # (rows,) output symbols so far
    longest: torch.Tensor  # (rows,) most output symbols, <eos> included (Rules.limits)

    def select(self, rows: torch.Tensor) -> Walk:
        return Walk(self.nodes[rows], self.length[rows], self.longest[rows])


@dataclass(frozen=True)
class LexiconScorer:
    """0 for every symbol the tree allows after a row's prefix, -inf for the others. At the
    length limit <eos> is allowed mid-word too: every rule lets a hypothesis end there."""

    edges: torch.Tensor  # Lexicon.edges, on the search's device
    rules: Rules
    eos: int

    def start(self, heard: Heard) -> Walk:
        longest = self.rules.limits(heard).longest
        return Walk(torch.full_like(longest, START, dtype=torch.int32), torch.zeros_like(longest), longest)

    def score(self, state: Walk, tokens: torch.Tensor) -> tuple[torch.Tensor, Walk]:
        edges = self.edges[state.nodes.long()]  # (rows, vocabulary)
        scores = torch.zeros(edges.shape, device=edges.device).masked_fill(edges == ABSENT, float("-inf"))
        at_limit = state.length + 1 >= state.longest
        scores[:, self.eos] = scores[:, self.eos].masked_fill(at_limit, 0.0)
        return scores, state

    def advance(self, scored: Walk, origin: torch.Tensor, tokens: torch.Tensor) -> Walk:
        rows = scored.select(origin)
        nodes = self.edges[rows.nodes.long(), tokens]
        # A row ended at the limit mid-word has no edge: it is ENDED all the same.
        return Walk(torch.where(nodes == ABSENT, ENDED, nodes), rows.length + 1, rows.longest)

    def keep(self, state: Walk, rows: torch.Tensor) -> Walk:
        return state.select(rows)
