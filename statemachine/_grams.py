"""Texts' trigram sets as bitmasks: the convergence check's measure, compiled when built.

:class:`GramMasks` gives each trigram of a run's vocabulary one bit of an int, so that the
cosine of two texts' trigram sets is two ``bit_count`` calls and a square root;
:func:`_highest` compares one text with a window of them. ``_grams_of`` gives the
trigrams :func:`statemachine._similarity.lexical_similarity` counts, shared by both.

This module imports nothing of the package's, so that ``setup.py`` can compile it with
mypyc (the compiler of mypy's project, pinned with mypy) into a C extension that Python
imports in place of this file (issue 23, twenty-eighth round). This file stays the source
and the reference: ``STATEMACHINE_PURE=1`` at install time builds nothing, and the tests
check the compiled module against this one, loaded as source (``tests/support.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Final, final


def _grams_of(folded: str) -> Iterator[str]:
    """The trigrams of a text as it is (``each_trigram`` of a folded text)."""
    if len(folded) < 3:
        return iter((folded,))
    # zip without its keyword: with one, zip() reads its arguments the slow way (about a
    # thousand instructions); the shorter slices end it, as strict=False does.
    return map("".join, zip(folded, folded[1:], folded[2:]))  # noqa: B905


# -- trigram bitmasks ----------------------------------------------------------------------

# A bitmask is built with ``|=`` until it is this wide, then through a bytearray
# (each ``|=`` copies the whole int, which grows with the vocabulary).
_NARROW_BITS = 4096
# How many masks and trigrams a run keeps before it starts them again (a cache).
_MASKS_KEPT = 256
_TRIGRAMS_KEPT = 1 << 14
# The vocabulary follows the evidence window's own: it starts again (with the window's
# trigrams alone) once it holds more than _GROWTH times what the window held at the last
# start, and more than _FLOOR trigrams (below that, masks are narrow anyway).
_GROWTH = 3
_FLOOR = 4096

# What a window holds of its texts: the texts, their masks and their sizes (as floats),
# each in the texts' order.
_Window = tuple[tuple[str, ...], tuple[int, ...], tuple[float, ...]]

# tuple.count and int.bit_count, read once (not through their types at each call). Final:
# compiled, _BIT_COUNT is read from a static of the extension, and called without looking
# the method up on each int, as the interpreter's specialised call of ``x.bit_count()``
# does (the window's loops below: 5.56 -> 5.09 us an advance on the bench's results,
# with the look-ups of _joined and _parted made as calls of the dicts' own get).
_COUNT: Callable[[tuple[float, ...], float], int] = tuple.count
_BIT_COUNT: Final = int.bit_count

# A window's sizes below this are each size's one float (_SIZES[count], made at import,
# where float(count) made a new one at each text): the same values, and a window of one
# size then holds one object, which tuple.count finds by identity.
_SIZED = 2048
_SIZES = tuple(map(float, range(_SIZED)))

# What advance reads of an empty window: no masks nor sizes.
_NOTHING: tuple[tuple[int, ...], tuple[float, ...]] = ((), ())

# The pieces of a text of one word (JSON, an id), for GramMasks._pieced: the text is cut
# into chunks before each ',' and ':' (a chunk: one character, then up to the next cut
# character), and a piece is a chunk with the two characters after it, read by the
# look-ahead (the group findall gives) while the match takes the chunk alone.
_PIECES = re.compile(r"(?=(.[^,:]*+.{0,2}+)).[^,:]*+", re.DOTALL)


@final
class GramMasks:
    """Texts' trigram sets as ints, one bit per trigram of one run's vocabulary.

    Then ``|A & B|`` is ``(a & b).bit_count()`` and ``|A|`` is ``a.bit_count()``: the
    convergence check compares a result with every text of the evidence window without
    building a set per comparison, and a result's mask, made when its gain is measured,
    is the signature it keeps as evidence. Shared by a loop state and its successors (a
    cache: what it holds never changes a result).
    """

    __slots__ = (
        "_base",
        "_bits",
        "_firsts",
        "_lasts",
        "_latest",
        "_pairs",
        "_parts",
        "_seen",
        "_shape",
        "_sides",
        "_tails",
        "_words",
        "masks",
    )

    def __init__(self) -> None:
        self._bits: dict[str, int] = {}
        # text -> (its mask, its number of trigrams)
        self.masks: dict[str, tuple[int, int]] = {}
        # A word with what precedes it in its text (see _joined) -> its trigrams' mask.
        self._words: dict[str, int] = {}
        # The segments of _joined kept in _words, by their word and the letter before
        # it: word -> {letter -> the segment's mask} (started again with _words).
        self._pairs: dict[str, dict[str, int]] = {}
        # The first and last segments of _joined kept in _words, by their words: word ->
        # the mask of "word " (first), word -> {letter -> the mask of "letter word"}
        # (last), started again with _words.
        self._firsts: dict[str, int] = {}
        self._lasts: dict[str, dict[str, int]] = {}
        # Parts of five characters of _joined's new segments -> their trigrams' masks
        # (started again with the vocabulary, or when past _TRIGRAMS_KEPT).
        self._parts: dict[str, int] = {}
        # The segments seen once, whose masks are not kept yet (see _joined).
        self._seen: set[str] = set()
        # The ends of _pieced's texts after a new piece, from a piece on (a text's end,
        # from a chunk's start) -> their trigrams' mask (started again with _words).
        self._tails: dict[str, int] = {}
        # The latest text _pieced found an end of after one new piece, cut there: its
        # start up to that piece's chunk and two characters more, the OR of the masks of
        # its pieces before it, its end (a key of _tails) and the end's mask (see
        # _pieced), or None (started again with the vocabulary).
        self._shape: tuple[str, int, str, int] | None = None
        # The starts and ends of the new pieces _pieced made after _shape's start (a
        # piece but its last four characters, its last five) -> their trigrams' masks
        # (started again with the vocabulary, or alone when past _TRIGRAMS_KEPT).
        self._sides: dict[str, int] = {}
        # The latest evidence window compared, and its texts' masks and sizes, in order.
        # (Sizes as floats: see _highest.)
        self._latest: _Window | None = None
        # How many trigrams the vocabulary held when the window's masks were last made
        # from nothing (the window's own trigrams, after a start): 0 until then.
        self._base = 0

    def start(self, window: int) -> None:
        """Before a comparison: start again if the cache has grown past its bounds.

        Only here, so that the masks of one comparison all share one vocabulary. The
        vocabulary starts again when it has grown to ``_GROWTH`` times the window's own
        (the trigrams of texts long gone from the window widen every mask): then only the
        window's texts are given bits again, when they are next compared, so the masks
        stay about as wide as what the window holds.
        """
        bits = len(self._bits)
        if (
            bits > _TRIGRAMS_KEPT
            or len(self._words) > _TRIGRAMS_KEPT
            or (bits > _FLOOR and bits > _GROWTH * self._base)
        ):
            self._bits = {}
            self._words = {}
            self._pairs = {}
            self._firsts = {}
            self._lasts = {}
            self._parts = {}
            self._seen = set()
            self._tails = {}
            self._shape = None
            self._sides = {}
            self.masks = {}
            self._latest = None
            self._base = 0
        elif len(self.masks) > max(_MASKS_KEPT, 4 * window):
            self.masks = {}  # the vocabulary stays: only the texts' masks are made again

    def mask(self, text: str, *, keep: bool = True) -> tuple[int, int]:
        """The bitmask of ``text``'s trigrams, and how many there are.

        ``keep=False`` for a text that will not be compared again as it is: it is not
        cached, so the cache fills, and starts again, less often.
        """
        known = self.masks.get(text)
        if known is not None:
            return known
        words = text.lower().split()
        mask = self._pieced(words) if len(words) < 2 else self._joined(words)
        known = (mask, mask.bit_count())
        if keep:
            self.masks[text] = known
        return known

    @property
    def _window(self) -> _Window | None:
        """The latest evidence window compared, its texts' masks and sizes."""
        return self._latest

    def _signed(self, window: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """The masks and sizes (as floats) of ``window``'s texts, kept for the window last
        compared."""
        kept = self._latest
        if kept is not None and kept[0] is window:
            return kept[1], kept[2]
        found = list(map(self.masks.get, window))
        # Every text's mask is cached as a rule (a window made again, of texts compared
        # before): then found is the masks as they are. zip without its keyword (with one
        # it reads its arguments the slow way): found is one per text of window. The masks
        # and counts split apart in C, without a frame per text.
        theirs = (
            found
            if None not in found
            else [known or self.mask(seen) for known, seen in zip(found, window)]  # noqa: B905
        )
        masks, counts = zip(*theirs) if theirs else ((), ())  # noqa: B905
        # Each size below _SIZED its one float (as advance appends them): a window of one
        # size holds one object, which it keeps as it moves on (see advance).
        sizes = (
            tuple(map(_SIZES.__getitem__, counts))
            if max(counts, default=0) < _SIZED
            else tuple(map(float, counts))
        )
        self._latest = (window, masks, sizes)
        if not self._base:  # the first window since a start: what the vocabulary follows
            self._base = len(self._bits)
        return masks, sizes

    def advance(
        self, evidence: tuple[str, ...], result: str, kept: str, size: int
    ) -> tuple[float, tuple[str, ...]]:
        """The convergence check of ``result`` and the evidence after it, in one pass.

        :meth:`best` of ``result`` against ``evidence``'s last ``size`` texts (0.0 when
        there are none), and those texts with ``kept`` (what of ``result`` the evidence
        keeps) last, whose masks are kept for the next comparison (the window moves on by
        one text: the next reuses these masks instead of looking each text's up again)."""
        bits = len(self._bits)
        if (
            # start does something only when one of these holds (its own tests imply them)
            bits > _FLOOR or len(self._words) > _TRIGRAMS_KEPT or len(self.masks) > _MASKS_KEPT
        ):
            self.start(size)
        window = evidence[-size:]
        # A full window's oldest text leaves it: (*window, kept)[-size:], with one tuple
        # fewer made (and the same for the masks and sizes below).
        full = len(window) == size
        after = (window[1:] if full else window) + (kept,)
        latest = self._latest
        if latest is not None and latest[0] is window:  # _signed's look, without its frame
            masks, sizes = latest[1], latest[2]
        else:
            masks, sizes = self._signed(window) if window else _NOTHING
        # self.mask(result), without its frame. A trigram new to the vocabulary gets the
        # next bit (len(bits), in every maker), and the window's masks were all made
        # before the result's (above, or at an earlier call: a vocabulary started again
        # drops every mask): so none holds a bit from `made` up, and the result's mask
        # without those bits (probe) shares with each exactly what the whole mask shares.
        # It is as wide as the result's highest older trigram, where the whole mask is as
        # wide as the vocabulary (a new number's trigram at its top): each AND reads fewer
        # digits. The whole mask is kept.
        known = self.masks.get(result)
        made = 0  # (a result's mask kept: made before the window's)
        new = known is None
        if known is None:
            made = len(self._bits)
            words = result.lower().split()
            mine = self._pieced(words) if len(words) < 2 else self._joined(words)
            known = self.masks[result] = (mine, mine.bit_count())
        mine, count = known
        best = 0.0
        alike = False  # a window of one size (and not empty)
        if window:
            probe = mine & ((1 << made) - 1) if new and mine.bit_length() > made else mine
            first = sizes[0]
            if first == sizes[-1] and _COUNT(sizes, first) == len(sizes):
                alike = True
                # Every text of the window of one size (a run's results alike but for a
                # number; the first and last compared first, so that a window of several
                # sizes seldom counts): each pair's |A & B| / sqrt(|A| |B|) is its shared
                # count divided by one float, and a division rounded to nearest keeps the
                # order of the counts, so the highest is the formula for the most shared,
                # the float _highest answers (the highest of the formula over every pair,
                # see there), without a root and a division a text. (first * count:
                # float(count) * the size, the int made the float it is exactly, a count
                # being below 2**53.) The highest count by a loop: the interpreter's own &
                # and bit_count (max over two maps measured no faster by the clock).
                top = 0
                for theirs in masks:
                    shared = _BIT_COUNT(probe & theirs)
                    if shared > top:
                        top = shared
                if top:
                    best = top / math.sqrt(first * count)
            else:
                # A window of several sizes (a run's results as their keys grow a digit):
                # _highest(probe, count, masks, sizes), without its frame (see there).
                root = math.sqrt
                for theirs, seen in zip(masks, sizes):  # noqa: B905
                    shared = _BIT_COUNT(probe & theirs)
                    if shared:
                        value = shared / root(seen * count)
                        if value > best:
                            best = value
        if kept != result:  # a result longer than the evidence keeps of it
            mine, count = self.mask(kept)
        if full:
            if alike and count == sizes[0]:
                # A full window of one size and a text of that size kept: its sizes are
                # the window's (each the same value: the size's float), only the masks
                # move on.
                self._latest = (after, masks[1:] + (mine,), sizes)  # noqa: RUF005
                return best, after
            masks, sizes = masks[1:], sizes[1:]
        self._latest = (
            after,
            masks + (mine,),  # noqa: RUF005
            sizes + (_SIZES[count] if count < _SIZED else float(count),),  # noqa: RUF005
        )
        return best, after

    def _joined(self, words: list[str]) -> int:
        """The mask of the text these words make (two or more), joined by single spaces:
        :meth:`_joined_wide`'s, its loop without what only a wide vocabulary or a first
        word of one letter needs."""
        if len(self._bits) > _NARROW_BITS or len(words[0]) < 2:
            return self._joined_wide(words)
        cache = self._words
        before = words[0]
        # The first segment by its word (_firsts), the last by its word and letter
        # (_lasts), each kept there with its mask in _words when found or made there.
        firsts = self._firsts
        mask = firsts.get(before)
        if mask is None:
            segment = f"{before} "
            mask = cache.get(segment)
            if mask is None:
                mask = cache[segment] = self._made(segment)
            firsts[before] = mask
        # The masks of segments made here (a number, an id: as wide as the vocabulary, as
        # a rule) are joined last, so that the others are joined while they are narrow.
        fresh = 0
        # A segment kept is found by its word and the letter before it (_pairs: the mask
        # _words holds for the segment, kept with it and started again with it), without
        # the segment's text made and hashed.
        pairs = self._pairs
        for word in words[1:-1]:
            letter = before[-1]
            before = word
            after = pairs.get(word)
            if after is not None:
                found = after.get(letter)
                if found is not None:
                    mask |= found
                    continue
            segment = f"{letter} {word} "
            found = cache.get(segment)
            if found is None:
                # A new segment (a number, an id: seldom seen again) is kept in _words
                # alone, and by its word and letter once found there.
                found = cache[segment] = self._parted(segment)
                fresh |= found
            else:
                mask |= found
                if after is None:
                    pairs[word] = {letter: found}
                else:
                    after[letter] = found
        letter = before[-1]
        word = words[-1]
        lasts = self._lasts
        after = lasts.get(word)
        if after is not None:
            found = after.get(letter)
            if found is not None:
                return mask | found | fresh
        segment = f"{letter} {word}"
        found = cache.get(segment)
        if found is None:
            found = cache[segment] = self._made(segment)
        if after is None:
            lasts[word] = {letter: found}
        else:
            after[letter] = found
        return mask | found | fresh

    def _parted(self, segment: str) -> int:
        """The mask of ``segment`` (four characters or more, new bits as needed), as
        :meth:`_made` makes it, from its parts of five characters (the last shorter)
        starting every third: the parts' trigrams are the segment's, each once and in its
        order. A part's mask is kept (_parts): a number's parts (" 3000", "00600") recur
        where the number does not. A part not kept is made from its slices of three taken
        in place, new bits given in the text's order (every trigram of a part kept has its
        bit): the segment's bits as trigram by trigram."""
        bits, parts = self._bits, self._parts
        if len(parts) > _TRIGRAMS_KEPT:
            parts = self._parts = {}
        found = 0
        for at in range(0, len(segment) - 2, 3):
            part = segment[at : at + 5]
            piece = parts.get(part)
            if piece is None:
                piece = 0
                for place in range(len(part) - 2):
                    gram = part[place : place + 3]
                    bit = bits.get(gram)
                    if bit is None:
                        bit = bits[gram] = len(bits)
                    piece |= 1 << bit
                parts[part] = piece
            found |= piece
        return found

    def _joined_wide(self, words: list[str]) -> int:
        """The mask of the text these words make (two or more), joined by single spaces.

        A trigram of it lies within one word and the spaces on either side of it, or is
        the last letter of a word, a space and the first of the next: so it lies within
        one of the segments "last letter of the word before, space, the word, space"
        (without what the text's ends lack), and every trigram of such a segment is one of
        the text's. The mask is the OR of the segments' masks, each made once for the run
        (words repeat, texts seldom do): the same bits as trigram by trigram, faster.

        Past ``_NARROW_BITS`` trigrams, where each segment's own mask is as wide as the
        vocabulary, a segment seen for the first time gets no mask of its own (most are
        never seen again: a number, an id): the trigrams of all such segments of the text
        are set in one mask, and a segment's own mask is made and kept when it is seen
        again.
        """
        cache, made, seen = self._words, self._made, self._seen
        if len(seen) > _TRIGRAMS_KEPT:  # only a note of what was seen once: start it again
            seen = self._seen = set()
        wide = len(self._bits) > _NARROW_BITS
        last = len(words) - 1
        mask = 0
        before = ""
        fresh: list[str] = []
        for at, word in enumerate(words):
            segment = f"{before}{word}{' ' if at < last else ''}"
            before = f"{word[-1]} "
            if len(segment) < 3:
                continue  # a first word of one letter has no trigram of its own ("a " in "a b")
            found = cache.get(segment)
            if found is None:
                if wide and segment not in seen:
                    seen.add(segment)
                    fresh.append(segment)
                    continue
                found = cache[segment] = made(segment)
            mask |= found
        if len(fresh) == 1:
            mask |= made(fresh[0])
        elif fresh:
            mask |= self._made_of(chain.from_iterable(map(_grams_of, fresh)))
        return mask

    def _made(self, folded: str) -> int:
        """The mask of the trigrams of ``folded`` (already folded), new bits as needed:
        :meth:`_made_of`'s, in one pass while the vocabulary is narrow."""
        bits = self._bits
        if len(bits) > _NARROW_BITS:
            return self._made_of(_grams_of(folded))
        mask = 0
        # _grams_of(folded), without its frame.
        grams = (
            map("".join, zip(folded, folded[1:], folded[2:]))  # noqa: B905
            if len(folded) > 2
            else (folded,)
        )
        for gram in grams:
            bit = bits.get(gram)
            if bit is None:
                bit = bits[gram] = len(bits)
            mask |= 1 << bit
        return mask

    def _made_of(self, grams: Iterable[str]) -> int:
        """The mask of ``grams``, new bits as needed."""
        bits = self._bits
        positions = []
        for gram in grams:
            bit = bits.get(gram)
            if bit is None:
                bit = bits[gram] = len(bits)
            positions.append(bit)
        if len(bits) <= _NARROW_BITS:
            mask = 0
            for bit in positions:
                mask |= 1 << bit
            return mask
        packed = bytearray((len(bits) >> 3) + 1)
        for bit in positions:
            packed[bit >> 3] |= 1 << (bit & 7)
        return int.from_bytes(packed, "little")

    def compared(self, text: str, window: tuple[str, ...], size: int) -> float:
        """``start(size)`` and then ``best(text, window)``, in one frame: ``start`` asked
        only when one of its tests may hold, and the window's masks (when they are the
        ones last compared) and ``text``'s read in place, without the frames of
        ``best``, ``_signed`` and ``mask``. The same caches and the same float."""
        if (
            # start does something only when one of these holds (its own tests imply them)
            len(self._bits) > _FLOOR
            or len(self._words) > _TRIGRAMS_KEPT
            or len(self.masks) > _MASKS_KEPT
        ):
            self.start(size)
        latest = self._latest
        if latest is not None and latest[0] is window:
            masks, sizes = latest[1], latest[2]
        else:
            masks, sizes = self._signed(window)
        # self.mask(text), without its frame.
        known = self.masks.get(text)
        if known is None:
            words = text.lower().split()
            mine = self._pieced(words) if len(words) < 2 else self._joined(words)
            known = self.masks[text] = (mine, mine.bit_count())
        mine, count = known
        # _highest(mine, count, masks, sizes), without its frame (see there).
        best = 0.0
        root = math.sqrt
        for theirs, seen in zip(masks, sizes):  # noqa: B905
            shared = (mine & theirs).bit_count()
            if shared:
                value = shared / root(seen * count)
                if value > best:
                    best = value
        return best

    def best(self, text: str, window: tuple[str, ...]) -> float:
        """The highest lexical similarity of ``text`` to a text of ``window`` (not empty)."""
        masks, sizes = self._signed(window)
        mine, size = self.mask(text)
        return _highest(mine, size, masks, sizes)

    def _pieced(self, words: list[str]) -> int:
        """The mask of the text of ``words`` (one word, or none: the text's folded words).

        A text of one word (a tool's JSON result, an id) is mostly what earlier texts were,
        with a key or a number changed. It is cut into chunks before its ',' and ':', and
        each piece is a chunk with the two characters after it (``_PIECES``): a trigram of
        the text lies within the piece of the chunk its first character is in, and every
        trigram of a piece is one of the text's. So the mask is the OR of the pieces'
        masks, each made once for the run and kept with the segments of :meth:`_joined`
        (each a mask of its own trigrams, three characters or more; no piece has white
        space, every segment has). Only a new piece (``:"k294","``) is made trigram by
        trigram, its trigrams given bits in the text's order, as :meth:`_made` gives them;
        a piece of fewer than three characters (at the text's end) has none. A text of one
        piece or none (no cut after its first character, the empty text) is made whole, as
        is one of fewer than three characters (its one trigram is itself, which no piece
        holds), and every text once the vocabulary is wide (each piece's mask as wide as
        it). After a new piece, the text's end from the next piece on is looked up whole
        (``_tails``: the OR of its pieces' masks, kept the first time it followed a new
        piece and was not found): a result alike but for its key ends as earlier ones did,
        and its end's pieces are not looked up one by one. The latest text whose end was
        so found is kept cut there (``_shape``): a text that starts and ends as it did
        with one chunk between is not cut into chunks, only that chunk's piece looked up;
        such a piece when new (seven characters or more) is its start but its last four
        characters and its end of five, each looked up whole (``_sides``: a key's number
        changes at its end, so the start recurs for ten keys and the end, from the
        number's last two digits, every hundredth key), and the one trigram between: the
        piece's trigrams, each once and in its order.
        """
        folded = words[0] if words else ""
        bits = self._bits
        shape = self._shape
        if shape is not None and len(bits) <= _NARROW_BITS:
            # The text starts and ends as the latest text whose end was found after one
            # new piece (_shape: ``head`` up to that piece's chunk and its first two
            # characters, ``ending`` that end, from a chunk's start): when what lies
            # between them (from the chunk's start ``at`` to the end's ``end``, a ',' or
            # ':' or the text's start) cuts nowhere, it is one chunk, its piece
            # folded[at : end + 2], and the loop below would look up the same pieces of
            # the start (each kept: the same masks, ORed in ``lead``), then that piece:
            # kept, the end's pieces one by one (kept, ORed in ``rear``) and nothing
            # kept; new, made as there and the end found whole (when _tails holds it).
            # A new piece of seven characters or more is made of its start (``front``:
            # all but its last four characters, trigrams 0 to n - 7 of its n - 2), the
            # trigram n - 6 and its end (``back``: its last five characters, trigrams
            # n - 5 to n - 3), the start and end looked up in _sides (a result's key or
            # number changes at its end: its piece's start is the last ten keys', its end
            # every hundredth key's) or made trigram by trigram and kept there: the piece's
            # trigrams each once and in its order, so the bits given are the loop's (a
            # start or end kept has every trigram's bit already).
            head, lead, ending, rear = shape
            if folded.startswith(head) and folded.endswith(ending):
                at = len(head) - 2
                end = len(folded) - len(ending)
                chunk = folded[at + 1 : end]
                if end > at and "," not in chunk and ":" not in chunk:
                    piece = folded[at : end + 2]
                    found = self._words.get(piece)
                    if found is not None:
                        return lead | found | rear
                    if self._tails.get(ending) is not None:
                        cut = len(piece) - 4
                        if cut < 3:  # a piece of six characters or fewer: one by one
                            found = 0
                            for at in range(len(piece) - 2):
                                gram = piece[at : at + 3]
                                bit = bits.get(gram)
                                if bit is None:
                                    bit = bits[gram] = len(bits)
                                found |= 1 << bit
                            self._words[piece] = found
                            return lead | rear | found
                        sides = self._sides
                        front = piece[:cut]
                        found = sides.get(front)
                        if found is None:  # seldom (a new start or end): _made, in its order
                            found = self._made(front)
                            if len(sides) > _TRIGRAMS_KEPT:
                                sides = self._sides = {}
                            sides[front] = found
                        gram = piece[cut - 2 : cut + 1]
                        bit = bits.get(gram)
                        if bit is None:
                            bit = bits[gram] = len(bits)
                        found |= 1 << bit
                        back = piece[cut - 1 :]
                        known = sides.get(back)
                        if known is None:
                            known = self._made(back)
                            if len(sides) > _TRIGRAMS_KEPT:
                                sides = self._sides = {}
                            sides[back] = known
                        found |= known
                        self._words[piece] = found
                        return lead | rear | found
        # The chunks (_PIECES's, without the regular expression): after the text's first
        # character, each ',' and ':' starts one, so the text after its first character
        # cut at them (the cut characters dropped) gives each chunk's length less one.
        parts = folded[1:].replace(",", ":").split(":")
        if len(parts) < 2 or len(bits) > _NARROW_BITS:
            return self._made(folded)
        cache = self._words
        get = cache.get
        tails = self._tails
        mask = 0
        # New pieces' masks (as wide as the vocabulary) are joined last, so that the
        # others are joined while they are narrow.
        fresh = 0
        start = 0
        # After a new piece, the text's end from the next piece on is looked up in
        # _tails: a result alike but for a key or a number ends as an earlier one did.
        # The end's mask is the OR of its pieces' (the trigrams starting in it), each
        # trigram of it with its bit already, so the bits given stay those of the loop.
        # ``tail``: where the end not found starts (-1: none), ``since`` its mask so far.
        # ``lone``: where the one new piece so far starts (-1: none or more than one),
        # ``lead`` the mask before it (for _shape).
        after = False
        tail = -1
        since = 0
        lone = -1
        lead = 0
        for part in parts:
            end = start + len(part) + 1
            if after:
                after = False
                known = tails.get(folded[start:])
                if known is not None:
                    if lone >= 0:
                        self._shape = (folded[: lone + 2], lead, folded[start:], known)
                    return mask | known | fresh
                tail = start
                since = 0
            piece = folded[start : end + 2]
            begin = start
            start = end
            found = get(piece)
            if found is None:
                if len(piece) < 3:
                    continue  # no trigram of its own (and never kept)
                # self._made(piece), without its frame (three characters or more), its
                # trigrams sliced in place.
                found = 0
                for at in range(len(piece) - 2):
                    gram = piece[at : at + 3]
                    bit = bits.get(gram)
                    if bit is None:
                        bit = bits[gram] = len(bits)
                    found |= 1 << bit
                cache[piece] = found
                if fresh:
                    lone = -1
                else:
                    lone = begin
                    lead = mask
                fresh |= found
                after = True
                tail = -1
            else:
                mask |= found
                if tail >= 0:
                    since |= found
        if tail >= 0 and since:  # an end not found, of a piece or more: kept
            if len(tails) > _TRIGRAMS_KEPT:
                tails = self._tails = {}
            tails[folded[tail:]] = since
        # Nothing: a text of fewer than three characters (a longer one has a trigram).
        return mask | fresh or self._made(folded)


def _highest(mine: int, count: int, masks: tuple[int, ...], sizes: tuple[float, ...]) -> float:
    """The highest ``|A & B| / sqrt(|A| |B|)`` of the text of mask ``mine`` (``count``
    trigrams) and the texts of ``masks`` (sizes in the same order), the float of that
    formula exactly as :func:`lexical_similarity` computes it; 0.0 when nothing is shared
    (or ``masks`` is empty).

    |A| |B| as the product of two floats: each size is an int a float holds exactly, and
    the product is a*b rounded once to the nearest float, as math.sqrt's own conversion
    of the int a*b rounds it (a text has a trigram: no size is 0). The formula is worked
    out for each pair that shares a trigram and the highest kept: a plain loop, by the
    clock no dearer than ranking the pairs by one multiply each (a scale 1 / sqrt(|B|)
    kept with each text), sorting the ranks and working the formula out for those ranked
    near the highest (rounds 19-24 of issue 23), and the same float: the highest of the
    same floats.
    """
    best = 0.0
    root = math.sqrt
    for theirs, seen in zip(masks, sizes):  # noqa: B905
        shared = (mine & theirs).bit_count()
        if shared:
            value = shared / root(seen * count)
            if value > best:
                best = value
    return best
