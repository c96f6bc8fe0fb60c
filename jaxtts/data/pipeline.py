"""grain input pipelines: length-bucketed, (seed, step)-deterministic, per-host sharded batches.

Two record kinds share ONE batching core (`BucketedLoader`):
- `LMLoader` over `LMRecord`s (text ids + speech tokens) -> the LM batch of docs/DESIGN.md:
  ```
  text        int32 [B, Lx]  prompt transcript ids + target text ids, 0-padded
  text_len    int32 [B]
  speech      int32 [B, Ly]  prompt speech tokens + target speech tokens, 0-padded
  speech_len  int32 [B]
  prompt_len  int32 [B]      leading speech-prompt tokens of each row
  ```
- `MelLoader` over `MelRecord`s (log-mel frames + text ids) for mel-level models (MDM, CTC ASR):
  `mel float32 [B, T, n_mels]`, `mel_len int32 [B]`, `text int32 [B, Lx]`, `text_len int32 [B]`.

Here B is the per-host batch: `batch_size // shard_count`.

How batch `step` is made (a pure function of `(seed, step, shard_index, shard_count)`):
1. Records whose TARGET alone is longer than the largest bucket of a field are dropped once,
   up front (count in `num_dropped`, logged). Nothing is cropped.
2. `epoch, j = divmod(step, steps_per_epoch)`. For the epoch, with numpy generators seeded by
   `(seed, epoch, purpose)`: the LM picks every record's prompt (below); the kept records are
   permuted (`shuffle=True`); the first `steps_per_epoch * batch_size` of them are cut into
   windows of `sort_window` batches, each window is sorted by length (speech / mel length, then
   text length) and cut into batches, so a batch holds records of similar length (small
   padding); the batch order is then shuffled. The records left over after the last full batch
   are skipped this epoch (`drop_remainder=True`, a different few each epoch) or form one last
   batch filled with empty padding rows (`drop_remainder=False`: all length fields 0).
3. Every field of the GLOBAL batch is padded to the smallest bucket boundary >= its longest row,
   so jit sees at most `len(text_buckets) * len(speech_buckets)` shapes and all hosts agree on
   the shape; host `shard_index` then builds only rows `[shard_index * B, (shard_index + 1) * B)`.
   Concatenating the shards of a step gives exactly the single-host batch.
A resumed run at step s therefore sees exactly what an uninterrupted run saw: `get_batch(s)`,
`dataset()[s]` (a `grain.MapDataset` indexed by step) or `iterator(start_step=s)` (grain thread
prefetch). The epoch plan is O(N log N) numpy, computed once per epoch and cached.

Prompts (`LMLoader`, zero-shot VALL-E-style training, see /work/shared/METHODS.md):
- Row = `text [prompt transcript ids + target text ids]`, `speech [prompt tokens + target tokens]`,
  `prompt_len` = number of prompt speech tokens.
- The prompt utterance is a DIFFERENT utterance of the same speaker (any record of the loader,
  also one dropped as too long), drawn uniformly from a generator seeded by (seed, epoch) for
  every record index, i.e. a function of (seed, epoch, index).
- Prompt speech = its first `round(prompt_seconds * frame_rate)` tokens (all of them when it is
  shorter), cropped further so the row fits the largest speech bucket.
- Prompt transcript: the manifests have no word alignments, so with
  `prompt_text='proportional'` (default) the first `round(len(text) * used / len(speech))`
  text ids of the prompt utterance are used (phoneme rate is roughly constant, so this is off by
  a symbol or two at the cut); `'full'` prepends the whole prompt transcript. When the prompt
  transcript does not fit the largest text bucket, the row gets no prompt.
- Speakers with a single utterance, and `prompt_seconds=0`, give rows without prompt
  (`prompt_len = 0`, text = target text only).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jaxtts.data.manifest import read_manifest
from jaxtts.data.text import SymbolTable, TextFrontend
from jaxtts.errors import ConfigError, DataError

if TYPE_CHECKING:  # grain is imported where a loader is built: decoding needs none
    import grain

__all__ = [
    "BucketedLoader",
    "LMLoader",
    "LMRecord",
    "MelLoader",
    "MelRecord",
    "encode_texts",
    "load_lm_records",
    "make_buckets",
    "make_lm_records",
    "make_mel_records",
    "pad_to_bucket",
]

log = logging.getLogger(__name__)

_ORDER, _PROMPT = 0, 1  # purposes of the per-epoch random generators


# ----------------------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True, eq=False)
class LMRecord:
    """One target utterance for the LM: text ids and speech tokens."""

    id: str
    speaker: str
    text_ids: np.ndarray  # int32 [Lx]
    speech: np.ndarray  # int32 [Ly]


@dataclasses.dataclass(frozen=True, eq=False)
class MelRecord:
    """One utterance for mel-level models: log-mel frames and text ids."""

    id: str
    speaker: str
    mel: np.ndarray  # float32 [T, n_mels]
    text_ids: np.ndarray  # int32 [Lx]


def encode_texts(utts: Sequence, text_encoder) -> list[np.ndarray]:
    """Text ids (int32 [L] each) of `Utterance`s.

    `text_encoder`: a `SymbolTable` (encodes the manifest `phonemes`, unknown symbols raise),
    a `TextFrontend` (its table on the manifest `phonemes` for an espeak front-end whose
    utterances have phonemes, else `encode_batch` of the texts), or a callable
    `Utterance -> int ids`.
    """
    if isinstance(text_encoder, TextFrontend):
        if text_encoder.backend == "espeak" and all(u.phonemes for u in utts):
            table = text_encoder.symbols
            return [table.encode(u.phonemes, unknown=text_encoder.unknown) for u in utts]
        return text_encoder.encode_batch([u.normalized_text or u.text for u in utts])
    if isinstance(text_encoder, SymbolTable):
        out = []
        for u in utts:
            if not u.phonemes:
                raise DataError(
                    f"utterance {u.id!r}: field 'phonemes' is empty, expected "
                    f"symbols for the SymbolTable (prepare with phonemize=True)"
                )
            out.append(text_encoder.encode(u.phonemes, unknown="error"))
        return out
    if callable(text_encoder):
        return [np.asarray(text_encoder(u), dtype=np.int32) for u in utts]
    raise ConfigError(
        f"text_encoder={text_encoder!r}: expected a SymbolTable, TextFrontend or "
        f"a callable Utterance -> ids"
    )


def _check_ids(uid: str, what: str, ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0:
        raise DataError(
            f"utterance {uid!r}: {what} has shape {ids.shape}, expected a non-empty 1-D id array"
        )
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0:
        raise DataError(
            f"utterance {uid!r}: {what} must be non-negative integers, got "
            f"dtype {ids.dtype} min {ids.min()}"
        )
    return ids.astype(np.int32)


def make_lm_records(
    utts: Sequence, tokens: Mapping[str, np.ndarray], text_encoder
) -> list[LMRecord]:
    """`LMRecord`s of `Utterance`s; `tokens[id]` are their speech tokens (int [T])."""
    text_ids = encode_texts(utts, text_encoder)
    records = []
    for u, ids in zip(utts, text_ids, strict=True):
        if u.id not in tokens:
            raise DataError(f"tokens: no speech tokens for utterance {u.id!r}")
        records.append(
            LMRecord(
                u.id,
                u.speaker,
                _check_ids(u.id, "text ids", ids),
                _check_ids(u.id, "speech tokens", tokens[u.id]),
            )
        )
    return records


def load_lm_records(
    corpus_dir: str | os.PathLike, split: str, tokenizer_name: str, text_encoder
) -> list[LMRecord]:
    """`LMRecord`s of `<corpus_dir>/<split>.jsonl`, tokens from
    `<corpus_dir>/tokens/<tokenizer_name>/<id>.npy`."""
    corpus_dir = Path(corpus_dir)
    utts = read_manifest(corpus_dir / f"{split}.jsonl", check_files=False)
    folder = corpus_dir / "tokens" / tokenizer_name
    tokens = {}
    for u in utts:
        path = folder / f"{u.id}.npy"
        if not path.is_file():
            raise DataError(f"{path}: speech tokens of {u.id!r} not found (extract_tokens first)")
        tokens[u.id] = np.load(path)
    return make_lm_records(utts, tokens, text_encoder)


def make_mel_records(
    utts: Sequence, mels: Mapping[str, np.ndarray] | Callable, text_encoder
) -> list[MelRecord]:
    """`MelRecord`s of `Utterance`s; `mels[id]` or `mels(utt)` gives float32 [T, n_mels]."""
    text_ids = encode_texts(utts, text_encoder)
    records = []
    n_mels = None
    for u, ids in zip(utts, text_ids, strict=True):
        if callable(mels):
            mel = mels(u)
        elif u.id in mels:
            mel = mels[u.id]
        else:
            raise DataError(f"mels: no mel frames for utterance {u.id!r}")
        mel = np.asarray(mel, dtype=np.float32)  # [T, n_mels]
        if mel.ndim != 2 or mel.shape[0] == 0 or (n_mels is not None and mel.shape[1] != n_mels):
            raise DataError(
                f"utterance {u.id!r}: mel has shape {mel.shape}, expected "
                f"[T > 0, {n_mels or 'n_mels'}]"
            )
        n_mels = mel.shape[1]
        records.append(MelRecord(u.id, u.speaker, mel, _check_ids(u.id, "text ids", ids)))
    return records


# ----------------------------------------------------------------------------- buckets


def make_buckets(max_len: int, step: int = 64) -> tuple[int, ...]:
    """Bucket boundaries `step, 2*step, ..., max_len` (max_len appended when not a multiple)."""
    if int(max_len) != max_len or int(step) != step or step < 1 or max_len < 1:
        raise ConfigError(
            f"make_buckets(max_len={max_len}, step={step}): expected positive integers"
        )
    out = list(range(step, max_len + 1, step))
    if not out or out[-1] != max_len:
        out.append(max_len)
    return tuple(out)


def _check_buckets(name: str, buckets: Sequence[int]) -> tuple[int, ...]:
    b = tuple(int(x) for x in buckets)
    if not b or b[0] < 1 or np.any(np.diff(b) <= 0) or tuple(buckets) != b:
        raise ConfigError(
            f"{name}={tuple(buckets)}: expected strictly increasing positive integers"
        )
    return b


def pad_to_bucket(length: int, buckets: Sequence[int]) -> int:
    """Smallest boundary >= length (DataError when longer than the last one)."""
    i = int(np.searchsorted(np.asarray(buckets), length, side="left"))
    if i == len(buckets):
        raise DataError(f"length {length} exceeds the largest bucket {buckets[-1]}")
    return int(buckets[i])


def pad_batch(
    mels: Sequence[np.ndarray], width: int, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """List of [T_i, M] -> (float32 [rows, width, M] zero-padded, int32 [rows] lengths)."""
    rows = len(mels) if rows is None else rows
    m = mels[0].shape[1]
    out = np.zeros((rows, width, m), np.float32)  # [B, T, M]
    lens = np.zeros((rows,), np.int32)  # [B]
    for i, x in enumerate(mels):
        out[i, : x.shape[0]] = x
        lens[i] = x.shape[0]
    return out, lens


def inference_mel_batches(
    mels: Sequence[np.ndarray] | np.ndarray,
    lens: Sequence[int] | np.ndarray | None,
    n_mels: int,
    batch_size: int,
    frame_bucket: int,
    caller: str,
) -> tuple[int, Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Few-shape padded batches of variable-length log-mels for a jitted inference model.

    `mels`: a list of [T_i, n_mels], or a padded [B, T, n_mels] (numpy or jax) with `lens`
    [B]. Clips are sorted by length, cut into batches of `batch_size`, padded to a multiple of
    `frame_bucket` frames and to a power-of-two row count (so few shapes compile); an empty
    clip becomes one zero frame. Returns (number of clips, iterator of (clip indices [b],
    mel float32 [rows, width, n_mels], lengths int32 [rows])); rows past b are padding.
    Raises DataError naming `caller` and the clip for a wrong shape.
    """
    if getattr(mels, "ndim", None) == 3:  # a padded numpy or jax array
        mels = np.asarray(mels)
        lens = np.full(len(mels), mels.shape[1]) if lens is None else np.asarray(lens)
        mels = [m[: int(n)] for m, n in zip(mels, lens, strict=True)]
    mels = [np.asarray(m, np.float32) for m in mels]
    for i, m in enumerate(mels):
        if m.ndim != 2 or m.shape[1] != n_mels:
            raise DataError(f"{caller}: mel {i} has shape {m.shape}, expected [T, {n_mels}]")
    mels = [m if m.shape[0] else np.zeros((1, n_mels), np.float32) for m in mels]
    order = np.argsort([m.shape[0] for m in mels], kind="stable")

    def batches():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            chunk = [mels[i] for i in idx]
            width = -(-max(m.shape[0] for m in chunk) // frame_bucket) * frame_bucket
            rows = min(1 << max(0, len(chunk) - 1).bit_length(), batch_size)  # next power of 2
            yield (idx, *pad_batch(chunk, width, rows=rows))

    return len(mels), batches()


# ----------------------------------------------------------------------------- core


@dataclasses.dataclass(frozen=True)
class _Epoch:
    batches: np.ndarray  # int64 [steps_per_epoch, batch_size] record index, -1 = padding row
    lengths: dict  # field -> int64 [N] row length of every record in this epoch
    extra: dict  # loader-specific per-record arrays (LM: prompt index / lengths)


class BucketedLoader(abc.ABC):
    """Shared machinery: dropping, per-epoch bucketed order, bucket padding, sharding, grain.

    Subclasses set `fields` (padded length fields, the first is the main sort key) and
    implement `_target_lengths`, `_epoch_lengths` and `_build_rows`.

    Args:
      num_records: N.
      batch_size: the GLOBAL batch size (all hosts together).
      buckets: field -> strictly increasing padded lengths; the last one is the maximum.
      seed: the data seed; batches are a pure function of (seed, step, shard).
      shuffle: permute records and batches every epoch (False: records in order, each sort
        window sorted by length, batches in window order).
      drop_remainder: see the module docstring.
      sort_window: batches per length-sorting window (1 = no length grouping).
      num_epochs: None = endless; else steps >= num_epochs * steps_per_epoch raise IndexError.
      shard_index / shard_count: this host's slice; default jax.process_index() / count().
    """

    fields: tuple[str, ...] = ()

    def __init__(
        self,
        num_records: int,
        batch_size: int,
        buckets: Mapping[str, Sequence[int]],
        seed: int = 0,
        shuffle: bool = True,
        drop_remainder: bool = True,
        sort_window: int = 32,
        num_epochs: int | None = None,
        shard_index: int | None = None,
        shard_count: int | None = None,
    ):
        if shard_index is None or shard_count is None:
            import jax  # start-up: jax 790 ms; loaders given shards skip it

            shard_index = jax.process_index() if shard_index is None else shard_index
            shard_count = jax.process_count() if shard_count is None else shard_count
        if int(batch_size) != batch_size or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size}: expected a positive integer")
        if shard_count < 1 or not 0 <= shard_index < shard_count:
            raise ConfigError(
                f"shard_index={shard_index}, shard_count={shard_count}: expected "
                f"0 <= shard_index < shard_count"
            )
        if batch_size % shard_count:
            raise ConfigError(
                f"batch_size={batch_size} is not divisible by shard_count={shard_count}"
            )
        if sort_window < 1:
            raise ConfigError(f"sort_window={sort_window}: expected >= 1")
        if not isinstance(seed, int | np.integer) or seed < 0:
            raise ConfigError(f"seed={seed!r}: expected a non-negative integer")
        if num_epochs is not None and num_epochs < 1:
            raise ConfigError(f"num_epochs={num_epochs}: expected None or >= 1")
        self.buckets = {f: _check_buckets(f"{f}_buckets", buckets[f]) for f in self.fields}
        self.num_records = num_records
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.drop_remainder = drop_remainder
        self.sort_window = int(sort_window)
        self.num_epochs = num_epochs
        self.shard_index = int(shard_index)
        self.shard_count = int(shard_count)
        self.local_batch_size = self.batch_size // self.shard_count

        target = self._target_lengths()
        ok = np.ones(num_records, dtype=bool)
        for f in self.fields:
            ok &= target[f] <= self.buckets[f][-1]
        self.kept = np.flatnonzero(ok)  # int64 [N_kept] record indices in use
        self.num_dropped = int(num_records - self.kept.size)
        if self.num_dropped:
            limits = ", ".join(f"{f} {self.buckets[f][-1]}" for f in self.fields)
            log.warning(
                f"{type(self).__name__}: dropped {self.num_dropped} of {num_records} "
                f"records longer than the largest buckets ({limits})"
            )
        n = self.kept.size
        full, rest = divmod(n, self.batch_size)
        self.steps_per_epoch = full + (1 if rest and not drop_remainder else 0)
        if self.steps_per_epoch == 0:
            raise DataError(
                f"{type(self).__name__}: {n} usable records (of {num_records}) give "
                f"no batch of batch_size={self.batch_size} with drop_remainder=True"
            )
        self._cache: dict[int, _Epoch] = {}
        self._lock = threading.Lock()

    # -- subclass hooks
    @abc.abstractmethod
    def _target_lengths(self) -> dict[str, np.ndarray]:
        """field -> int64 [N] length of every record without prompt (decides dropping)."""

    def _epoch_lengths(
        self, epoch: int, rng: np.random.Generator
    ) -> tuple[dict[str, np.ndarray], dict]:
        """(field -> int64 [N] row lengths this epoch, extra per-record arrays)."""
        return self._target_lengths(), {}

    @abc.abstractmethod
    def _build_rows(
        self, rows: np.ndarray, ep: _Epoch, pad: dict[str, int]
    ) -> dict[str, np.ndarray]:
        """The batch dict of record indices `rows` (-1 = padding row), padded to `pad`."""

    # -- epoch plan
    def _rng(self, epoch: int, purpose: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, purpose])

    def _plan(self, epoch: int) -> _Epoch:
        with self._lock:
            ep = self._cache.get(epoch)
            if ep is not None:
                return ep
            lengths, extra = self._epoch_lengths(epoch, self._rng(epoch, _PROMPT))
            B = self.batch_size
            rng = self._rng(epoch, _ORDER)
            order = rng.permutation(self.kept) if self.shuffle else self.kept.copy()  # [N_kept]
            full = order.size // B
            main, rest = order[: full * B], order[full * B :]
            window = self.sort_window * B
            keys = [lengths[f] for f in reversed(self.fields)]  # lexsort: last key is primary
            chunks = []
            for start in range(0, main.size, window):
                chunk = main[start : start + window]
                chunks.append(chunk[np.lexsort([k[chunk] for k in keys])])
            batches = np.concatenate(chunks).reshape(full, B) if full else np.zeros((0, B), int)
            if self.shuffle:
                batches = batches[rng.permutation(full)]
            if rest.size and not self.drop_remainder:
                last = np.full((1, B), -1, dtype=np.int64)
                last[0, : rest.size] = np.sort(rest)
                batches = np.concatenate([batches, last])
            ep = _Epoch(batches.astype(np.int64), lengths, extra)
            if len(self._cache) >= 2:  # the train loop crosses epochs forward: keep 2
                self._cache.pop(min(self._cache))
            self._cache[epoch] = ep
            return ep

    def _locate(self, step: int) -> tuple[_Epoch, np.ndarray]:
        if int(step) != step or step < 0:
            raise IndexError(f"step={step}: expected a non-negative integer")
        epoch, j = divmod(int(step), self.steps_per_epoch)
        if self.num_epochs is not None and epoch >= self.num_epochs:
            raise IndexError(
                f"step={step}: beyond num_epochs={self.num_epochs} "
                f"({self.steps_per_epoch} steps each)"
            )
        ep = self._plan(epoch)
        return ep, ep.batches[j]  # [B] global rows

    # -- public
    def global_rows(self, step: int) -> np.ndarray:
        """Record indices of the GLOBAL batch of `step` (int64 [batch_size], -1 = padding)."""
        return self._locate(step)[1].copy()

    def rows(self, step: int) -> np.ndarray:
        """Record indices of this shard's rows of `step` (int64 [B], -1 = padding)."""
        b = self.local_batch_size
        return self.global_rows(step)[self.shard_index * b : (self.shard_index + 1) * b]

    def get_batch(self, step: int) -> dict[str, np.ndarray]:
        """This shard's batch of `step`: a pure function of (seed, step, shard)."""
        ep, rows = self._locate(step)
        valid = rows[rows >= 0]
        pad = {
            f: pad_to_bucket(int(ep.lengths[f][valid].max()), self.buckets[f]) for f in self.fields
        }
        b = self.local_batch_size
        return self._build_rows(rows[self.shard_index * b : (self.shard_index + 1) * b], ep, pad)

    def __len__(self) -> int:
        if self.num_epochs is None:
            return sys.maxsize
        return self.num_epochs * self.steps_per_epoch

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        return self.get_batch(step)

    def dataset(self) -> grain.MapDataset:
        """grain MapDataset whose element `step` is `get_batch(step)` (endless unless
        num_epochs)."""
        import grain  # imported on use: decoding and one-batch benchmarks need no loader

        return grain.MapDataset.source(self)

    def iterator(
        self,
        start_step: int = 0,
        num_steps: int | None = None,
        prefetch: int = 2,
        num_threads: int = 1,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Batches of steps start_step, start_step + 1, ... (num_steps of them, or endless),
        built ahead by `num_threads` grain prefetch threads (`prefetch` batches buffered;
        prefetch=0: built on demand in the calling thread)."""
        if start_step < 0 or (num_steps is not None and num_steps < 0):
            raise ConfigError(f"start_step={start_step}, num_steps={num_steps}: expected >= 0")
        stop = None if num_steps is None else start_step + num_steps
        import grain  # optional: not in the GPU bundle (see dataset())

        ds = self.dataset()[start_step:stop]
        opts = grain.ReadOptions(
            num_threads=num_threads if prefetch else 0, prefetch_buffer_size=prefetch
        )
        return iter(ds.to_iter_dataset(opts))


def _pad_ids(arrays: Sequence[np.ndarray | None], width: int) -> np.ndarray:
    out = np.zeros((len(arrays), width), dtype=np.int32)  # [B, width]
    for i, a in enumerate(arrays):
        if a is not None:
            out[i, : a.shape[0]] = a
    return out


# ----------------------------------------------------------------------------- LM


class LMLoader(BucketedLoader):
    """LM batches (docs/DESIGN.md) with speaker prompts; see the module docstring.

    Args (besides `BucketedLoader`'s):
      records: `LMRecord`s (e.g. `load_lm_records(...)`).
      text_buckets / speech_buckets: padded lengths (`make_buckets(max_len, step)`).
      prompt_seconds: prompt duration (0 = no prompts); frame_rate: speech tokens per second.
      prompt_text: 'proportional' or 'full' prompt transcript.
    """

    fields = ("speech", "text")

    def __init__(
        self,
        records: Sequence[LMRecord],
        batch_size: int,
        text_buckets: Sequence[int],
        speech_buckets: Sequence[int],
        prompt_seconds: float = 3.0,
        frame_rate: float = 50.0,
        prompt_text: str = "proportional",
        **kw,
    ):
        if prompt_seconds < 0 or frame_rate <= 0:
            raise ConfigError(
                f"prompt_seconds={prompt_seconds}, frame_rate={frame_rate}: "
                f"expected prompt_seconds >= 0 and frame_rate > 0"
            )
        if prompt_text not in ("proportional", "full"):
            raise ConfigError(f"prompt_text={prompt_text!r}: expected 'proportional' or 'full'")
        if not records:
            raise DataError("LMLoader: no records")
        self.records = list(records)
        self.prompt_tokens = int(round(prompt_seconds * frame_rate))
        self.prompt_text = prompt_text
        self._text_len = np.array([r.text_ids.shape[0] for r in self.records], np.int64)  # [N]
        self._speech_len = np.array([r.speech.shape[0] for r in self.records], np.int64)  # [N]
        # Speaker groups as one flat member array: group g = members[start[g]:start[g]+size[g]].
        spk = np.array([r.speaker for r in self.records], dtype=object)
        _, group = np.unique(spk.astype(str), return_inverse=True)
        self._members = np.argsort(group, kind="stable")  # [N] records sorted by speaker group
        sizes = np.bincount(group)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._group_start = starts[group]  # [N]
        self._group_size = sizes[group]  # [N]
        self._pos = np.empty(len(self.records), np.int64)  # [N] position inside its group
        self._pos[self._members] = np.arange(len(self.records)) - np.repeat(starts, sizes)
        super().__init__(
            len(self.records), batch_size, {"text": text_buckets, "speech": speech_buckets}, **kw
        )

    def _target_lengths(self):
        return {"text": self._text_len, "speech": self._speech_len}

    def _epoch_lengths(self, epoch, rng):
        n = len(self.records)
        r = rng.integers(0, 2**62, size=n)  # [N] one draw per record index
        size = self._group_size
        has = (size > 1) & (self.prompt_tokens > 0)
        offset = 1 + r % np.maximum(size - 1, 1)  # another member: shift 1..size-1 in the group
        prompt = np.where(has, self._members[self._group_start + (self._pos + offset) % size], -1)
        p = np.maximum(prompt, 0)
        room_s = self.buckets["speech"][-1] - self._speech_len
        room_t = self.buckets["text"][-1] - self._text_len
        ps = np.where(
            has,
            np.minimum(np.minimum(self.prompt_tokens, self._speech_len[p]), np.maximum(room_s, 0)),
            0,
        )
        if self.prompt_text == "full":
            pt = self._text_len[p].copy()
        else:
            pt = np.rint(self._text_len[p] * ps / self._speech_len[p]).astype(np.int64)
        fits = has & (ps > 0) & (pt <= room_t)
        ps, pt = np.where(fits, ps, 0), np.where(fits, pt, 0)
        prompt = np.where(fits, prompt, -1)
        lengths = {"text": self._text_len + pt, "speech": self._speech_len + ps}
        return lengths, {"prompt": prompt, "prompt_speech": ps, "prompt_text": pt}

    def prompts(self, step: int) -> np.ndarray:
        """Prompt record index of each of this shard's rows of `step` (-1 = no prompt)."""
        ep, _ = self._locate(step)
        rows = self.rows(step)
        return np.where(rows >= 0, ep.extra["prompt"][np.maximum(rows, 0)], -1)

    def _build_rows(self, rows, ep, pad):
        texts, speeches, plen = [], [], []
        for i in rows:
            if i < 0:
                texts.append(None), speeches.append(None), plen.append(0)
                continue
            rec = self.records[i]
            j, ps, pt = (
                ep.extra["prompt"][i],
                ep.extra["prompt_speech"][i],
                ep.extra["prompt_text"][i],
            )
            if j >= 0:
                pr = self.records[j]
                texts.append(np.concatenate([pr.text_ids[:pt], rec.text_ids]))  # [pt + Lx]
                speeches.append(np.concatenate([pr.speech[:ps], rec.speech]))  # [ps + Ly]
            else:
                texts.append(rec.text_ids), speeches.append(rec.speech)
            plen.append(ps)
        return {
            "text": _pad_ids(texts, pad["text"]),  # [B, Lx]
            "text_len": np.array([0 if t is None else t.shape[0] for t in texts], np.int32),
            "speech": _pad_ids(speeches, pad["speech"]),  # [B, Ly]
            "speech_len": np.array([0 if s is None else s.shape[0] for s in speeches], np.int32),
            "prompt_len": np.asarray(plen, dtype=np.int32),  # [B]
        }

    @classmethod
    def from_config(
        cls, records: Sequence[LMRecord], data_cfg, frame_rate: float, **kw
    ) -> LMLoader:
        """From the `data` config block (configs/common.py: batch_size, max_text_len,
        max_speech_len, bucket_step (speech; text uses text_bucket_step when set),
        prompt_seconds, seed)."""
        return cls(
            records,
            data_cfg.batch_size,
            text_buckets=make_buckets(
                data_cfg.max_text_len, data_cfg.get("text_bucket_step") or data_cfg.bucket_step
            ),
            speech_buckets=make_buckets(data_cfg.max_speech_len, data_cfg.bucket_step),
            prompt_seconds=data_cfg.prompt_seconds,
            frame_rate=frame_rate,
            seed=data_cfg.seed,
            **kw,
        )


# ----------------------------------------------------------------------------- mel


class MelLoader(BucketedLoader):
    """Mel batches `mel float32 [B, T, n_mels]`, `mel_len`, `text`, `text_len` (same
    bucketing / determinism / sharding as `LMLoader`, no prompts); with `speaker_emb` (record
    id -> float32 [E], e.g. a speaker encoder's embedding of the utterance) also `speaker`
    float32 [B, E] (zeros on padding rows)."""

    fields = ("mel", "text")

    def __init__(
        self,
        records: Sequence[MelRecord],
        batch_size: int,
        mel_buckets: Sequence[int],
        text_buckets: Sequence[int],
        speaker_emb=None,
        **kw,
    ):
        if not records:
            raise DataError("MelLoader: no records")
        self.records = list(records)
        self.speaker_emb = speaker_emb
        if speaker_emb is not None:
            missing = [r.id for r in self.records if r.id not in speaker_emb]
            if missing:
                raise DataError(f"MelLoader: no speaker embedding for utterance {missing[0]!r}")
        self.n_mels = self.records[0].mel.shape[1]
        for r in self.records:
            if r.mel.ndim != 2 or r.mel.shape[1] != self.n_mels:
                raise DataError(
                    f"record {r.id!r}: mel shape {r.mel.shape}, expected [T, {self.n_mels}]"
                )
        self._lengths = {
            "mel": np.array([r.mel.shape[0] for r in self.records], np.int64),  # [N]
            "text": np.array([r.text_ids.shape[0] for r in self.records], np.int64),  # [N]
        }
        super().__init__(
            len(self.records), batch_size, {"mel": mel_buckets, "text": text_buckets}, **kw
        )

    def _target_lengths(self):
        return self._lengths

    def _build_rows(self, rows, ep, pad):
        mel = np.zeros((len(rows), pad["mel"], self.n_mels), np.float32)  # [B, T, n_mels]
        recs = [self.records[i] if i >= 0 else None for i in rows]
        for b, r in enumerate(recs):
            if r is not None:
                mel[b, : r.mel.shape[0]] = r.mel
        out = {}
        if self.speaker_emb is not None:
            dim = np.asarray(next(iter(self.speaker_emb.values()))).shape[-1]
            out["speaker"] = np.stack(
                [
                    np.zeros(dim, np.float32)
                    if r is None
                    else np.asarray(self.speaker_emb[r.id], np.float32)
                    for r in recs
                ]
            )
        return out | {
            "mel": mel,
            "mel_len": np.array([0 if r is None else r.mel.shape[0] for r in recs], np.int32),
            "text": _pad_ids([None if r is None else r.text_ids for r in recs], pad["text"]),
            "text_len": np.array([0 if r is None else r.text_ids.shape[0] for r in recs], np.int32),
        }
