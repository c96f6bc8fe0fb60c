"""Speech tokenizers behind one interface: `fit`, `encode`, `decode`, `save`, `load`.

* `KMeansTokenizer` (kind 'kmeans'): k-means over per-bin standardised log-mel frames
  (K = 1024 by default, one token per 20 ms frame = 50 Hz). `frames=2` clusters pairs of
  consecutive frames (the standardised 2 x 80 vector; an odd last frame is repeated) and
  decodes each token to two frames: 25 Hz tokens, as CosyVoice 2, PALLE and TLDR use
  (name `kmeans<K>x2`). Decoded by centroid lookup
  (de-standardised) -> log-mel -> vocoder, or, when the tokenizer has a **context decoder**
  (`fit_context_decoder`, saved as `context_tables.npy`), by a linear function of the token
  and its W neighbours on each side: `z_t = sum_{o=-W..W} E_o[x_{t+o}]` (E_o: [K+1, f M]
  tables, index K = outside the utterance), fitted in closed form by ridge regression onto the
  standardised frames, shrunk towards the centroids (E_0 -> centers, E_o -> 0). It is the
  least-squares version of CosyVoice's learned token-to-mel decoder, kept linear so that it
  fits in seconds; it never changes `encode` (not part of the fingerprint). On top of either,
  an optional **conv decoder** (`fit_conv_decoder`, `jaxtts.data.token_decoder`, saved as
  `conv_decoder.npz`) adds a learned non-linear residual from a wider token context (a small
  residual conv stack, trained in minutes; decode-only too). The k-means is
  fitted with k-means++ seeding on a subsample and Lloyd iterations in JAX (jitted, chunked
  distance computation) over up to `max_fit_frames` frames; empty clusters are re-seeded
  with the currently worst-fitted frames.
* `LinearMelQuantizer` (kind 'mel_quantizer'): the MDM paper's scalar quantiser, shared by all
  bins: `q = round((clip(x, lo, hi) - lo) / (hi - lo) * (Q - 1))`, Q = 100 by default;
  `decode(q) = lo + q (hi - lo) / (Q - 1)` is its exact inverse on the grid
  (`encode(decode(q)) == q`); lo / hi are low / high percentiles of the training frames.
  Tokens are int32 [T, n_mels].
* `ExternalTokens` (kind 'external'): tokens made elsewhere (HuBERT k-means, S3 tokens) and
  stored as `<corpus>/tokens/<name>/<id>.npy`. It cannot `encode` audio; `fit(mels, tokens)`
  learns the mean log-mel of every token (token rate may be an integer divisor of the mel
  rate, e.g. 25 Hz S3 tokens over 50 Hz mels), which gives `decode` a centroid lookup too.

`extract_tokens` writes `tokens/<tokenizer name>/<id>.npy` for a manifest's utterances and
skips files that exist (a second run is instant). Everything is saved as `tokenizer.json`
(+ `.npy` arrays) in one folder; `load_tokenizer(folder)` restores any kind.

Axis letters: T frames, M mel bins, K clusters.
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import hashlib
import json
import logging
import os
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from jaxtts.data import token_decoder
from jaxtts.data.audio import MelConfig, MelStats, load_audio, log_mel, utterance_mels
from jaxtts.data.manifest import read_split
from jaxtts.errors import ConfigError, DataError, JaxttsError

log = logging.getLogger(__name__)

__all__ = [
    "ExternalTokens",
    "KMeansTokenizer",
    "LinearMelQuantizer",
    "SpeechTokenizer",
    "extract_tokens",
    "fit_kmeans_tokenizer",
    "kmeans_fit",
    "load_tokenizer",
    "load_tokens",
    "make_tokenizer",
]

_META = "tokenizer.json"


class SpeechTokenizer(abc.ABC):
    """Mel frames <-> discrete tokens. `vocab_size` ids, `frame_rate` tokens per second."""

    kind: str = ""

    def __init__(self, name: str, mel_cfg: MelConfig):
        self.name = name
        self.mel_cfg = mel_cfg

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of distinct token ids (per position)."""

    @property
    def frame_rate(self) -> float:
        return self.mel_cfg.frame_rate

    @property
    def fitted(self) -> bool:
        return True

    @property
    def lookahead_tokens(self) -> int:
        """How many later tokens a token's decoded frames depend on (0: frame-local)."""
        return 0

    @abc.abstractmethod
    def fit(self, mels: Sequence[np.ndarray], **kw) -> SpeechTokenizer:
        """Learns the tokenizer from log-mels ([T_i, n_mels] each); returns self."""

    @abc.abstractmethod
    def encode(self, mel: np.ndarray) -> np.ndarray:
        """log-mel [T, n_mels] -> int32 tokens."""

    @abc.abstractmethod
    def decode(self, tokens: np.ndarray) -> np.ndarray:
        """int tokens -> log-mel float32 [T, n_mels]."""

    # -- persistence
    def _state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able fields, arrays) to save."""
        return {}, {}

    # state that only `decode` reads: saved, but not part of the fingerprint
    _decode_only: tuple[str, ...] = ()

    def fingerprint(self) -> str:
        """sha256 of everything that decides the tokens (kind, name, mel settings, state);
        stamps a token cache so that tokens of another tokenizer of the same name are never
        reused silently. Decode-only state (`_decode_only`) is left out."""
        fields, arrays = self._state()
        fields = {k: v for k, v in fields.items() if k not in self._decode_only}
        arrays = {k: v for k, v in arrays.items() if k not in self._decode_only}
        h = hashlib.sha256(
            json.dumps(
                {"kind": self.kind, "name": self.name, "mel_cfg": self.mel_cfg.to_dict(), **fields},
                sort_keys=True,
                default=str,
            ).encode()
        )
        for key in sorted(arrays):
            arr = np.ascontiguousarray(arrays[key])
            h.update(f"{key}{arr.dtype}{arr.shape}".encode())
            h.update(arr.tobytes())
        return h.hexdigest()

    def _check_fitted(self, what: str) -> None:
        if not self.fitted:
            raise DataError(f"{type(self).__name__} {self.name!r}: {what} before fit()")

    def save(self, directory: str | os.PathLike) -> Path:
        self._check_fitted("save")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        fields, arrays = self._state()
        for key, arr in arrays.items():
            if isinstance(arr, dict):  # a bundle of named arrays -> one .npz
                np.savez(directory / f"{key}.npz", **arr)
            else:
                np.save(directory / f"{key}.npy", arr)
        if (directory / _META).is_file():  # drop the files of state removed since the last save
            try:
                old = json.loads((directory / _META).read_text())
            except json.JSONDecodeError:
                old = {}
            for key in set(old.get("arrays", [])) - set(arrays):
                (directory / f"{key}.npy").unlink(missing_ok=True)
            for key in set(old.get("bundles", [])) - set(arrays):
                (directory / f"{key}.npz").unlink(missing_ok=True)
        meta = {
            "kind": self.kind,
            "name": self.name,
            "mel_cfg": self.mel_cfg.to_dict(),
            "arrays": sorted(k for k, v in arrays.items() if not isinstance(v, dict)),
            "bundles": sorted(k for k, v in arrays.items() if isinstance(v, dict)),
            **fields,
        }
        tmp = directory / (_META + ".tmp")
        tmp.write_text(json.dumps(meta, indent=1) + "\n")
        os.replace(tmp, directory / _META)
        return directory

    def _check_mel(self, mel: np.ndarray) -> np.ndarray:
        mel = np.asarray(mel, np.float32)
        if mel.ndim != 2 or mel.shape[1] != self.mel_cfg.n_mels:
            raise DataError(
                f"{type(self).__name__}.encode: mel of shape {mel.shape}, expected "
                f"[T, {self.mel_cfg.n_mels}]"
            )
        return mel


# ----------------------------------------------------------------------------- k-means


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (float32 [N, D] -> [K, D])."""
    n = x.shape[0]
    centers = np.empty((k, x.shape[1]), np.float32)
    centers[0] = x[rng.integers(n)]
    d2 = np.sum((x - centers[0]) ** 2, axis=1)  # [N]
    for i in range(1, k):
        total = d2.sum()
        j = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
        centers[i] = x[j]
        d2 = np.minimum(d2, np.sum((x - centers[i]) ** 2, axis=1))
    return centers


def _assign_fn():
    import jax  # start-up: jax 660 ms, only k-means assignment
    import jax.numpy as jnp  # start-up: see jax above

    @jax.jit
    def assign(x, c):  # [N, D], [K, D] -> ids [N], squared distance [N]
        d2 = (
            jnp.sum(x * x, 1)[:, None]
            - 2.0 * jnp.einsum("nd,kd->nk", x, c)
            + jnp.sum(c * c, 1)[None, :]
        )  # [N, K]
        ids = jnp.argmin(d2, axis=1)
        return ids.astype(jnp.int32), jnp.maximum(jnp.min(d2, axis=1), 0.0)

    return assign


_ASSIGN: Callable | None = None
_CHUNK = 32768  # rows per jitted assignment call (fixed shape: one compile)


def kmeans_assign(x: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest center of each row: (int32 [N], squared distance float32 [N])."""
    global _ASSIGN
    if _ASSIGN is None:
        _ASSIGN = _assign_fn()
    n = x.shape[0]
    ids = np.empty(n, np.int32)
    dist = np.empty(n, np.float32)
    chunk = _CHUNK if n > _CHUNK else max(1, 1 << (n - 1).bit_length())  # few distinct shapes
    for start in range(0, n, chunk):
        part = x[start : start + chunk]
        m = part.shape[0]
        if m < chunk:
            part = np.pad(part, ((0, chunk - m), (0, 0)))
        i, d = _ASSIGN(part, centers)
        ids[start : start + m] = np.asarray(i)[:m]
        dist[start : start + m] = np.asarray(d)[:m]
    return ids, dist


def kmeans_fit(
    x: np.ndarray,
    k: int,
    iters: int = 25,
    seed: int = 0,
    tol: float = 1e-4,
    init_frames: int = 50_000,
    progress: bool = False,
) -> tuple[np.ndarray, list]:
    """Lloyd's k-means: float32 [N, D] -> (centers [K, D], inertia per iteration)."""
    from tqdm.auto import tqdm  # start-up: tqdm.auto 55 ms, only when fitting

    x = np.ascontiguousarray(x, np.float32)
    n = x.shape[0]
    if n < k:
        raise DataError(f"k-means: {n} frames for K={k} clusters, expected at least K frames")
    rng = np.random.default_rng(seed)
    sub = x[rng.choice(n, size=min(n, init_frames), replace=False)]
    centers = _kmeans_pp(sub, k, rng)
    history = []
    for _ in tqdm(range(iters), desc=f"k-means K={k}", disable=not progress, leave=False):
        ids, d2 = kmeans_assign(x, centers)
        history.append(float(d2.mean()))
        counts = np.bincount(ids, minlength=k).astype(np.float64)  # [K]
        sums = np.zeros((k, x.shape[1]), np.float64)
        np.add.at(sums, ids, x)
        empty = np.flatnonzero(counts == 0)
        centers = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        if empty.size:  # re-seed with the worst-fitted frames
            worst = np.argsort(d2)[::-1][: empty.size]
            centers[empty] = x[worst]
        if len(history) > 1 and history[-2] - history[-1] < tol * history[-2] and not empty.size:
            break
    return centers, history


class KMeansTokenizer(SpeechTokenizer):
    """k-means tokens over standardised log-mel frames (see module docstring)."""

    kind = "kmeans"
    _decode_only = (
        "context_tables",
        "context_window",
        "context_ridge",
        "context_fit",
        "conv_decoder",
        "conv_fit",
        "gv_scale",
    )

    def __init__(
        self,
        k: int = 1024,
        mel_cfg: MelConfig = MelConfig(),
        name: str | None = None,
        iters: int = 25,
        max_fit_frames: int = 400_000,
        seed: int = 0,
        frames: int = 1,
    ):
        if k < 2:
            raise ConfigError(f"KMeansTokenizer: k={k}, expected >= 2")
        if frames < 1:
            raise ConfigError(f"KMeansTokenizer: frames={frames}, expected >= 1 mel frames a token")
        super().__init__(name or self.default_name(k, frames), mel_cfg)
        self.k, self.iters, self.max_fit_frames, self.seed = int(k), iters, max_fit_frames, seed
        self.frames = int(frames)
        self.stats: MelStats | None = None
        self.centers: np.ndarray | None = None  # float32 [K, M] standardised
        self.inertia: list[float] = []
        self.context_tables: np.ndarray | None = None  # float32 [2W + 1, K + 1, f M] or None
        self.context_ridge: float = 0.0
        self.context_fit: dict = {}  # what the context decoder was fitted on (reported)
        self.conv_decoder: dict[str, np.ndarray] | None = None  # token_decoder params or None
        self.conv_fit: dict = {}  # its config, data and dev numbers (reported)
        self.gv_scale: float = 1.0  # postfilter: deviations from the utterance mean x this

    @staticmethod
    def default_name(k: int, frames: int = 1) -> str:
        """`kmeans<K>` (50 Hz) or `kmeans<K>x<frames>`: the tokenizer's folder and token names."""
        return f"kmeans{int(k)}" if int(frames) == 1 else f"kmeans{int(k)}x{int(frames)}"

    @property
    def vocab_size(self) -> int:
        return self.k

    @property
    def fitted(self) -> bool:
        return self.centers is not None

    @property
    def frame_rate(self) -> float:
        return self.mel_cfg.frame_rate / self.frames

    def _stack(self, z: np.ndarray) -> np.ndarray:
        """Standardised frames [T, M] -> token vectors [ceil(T / f), f M] (last frame repeated
        to fill the last group)."""
        f = self.frames
        if f == 1 or z.shape[0] == 0:
            return z.reshape(-1, f * z.shape[1]) if z.shape[0] == 0 else z
        pad = -z.shape[0] % f
        z = np.concatenate([z, np.repeat(z[-1:], pad, axis=0)]) if pad else z
        return z.reshape(-1, f * z.shape[1])

    def fit(self, mels: Sequence[np.ndarray], progress: bool = False) -> KMeansTokenizer:
        mels = [self._check_mel(m) for m in mels]
        self.stats = MelStats.fit(mels)
        x = np.concatenate([self._stack(self.stats.normalize(m)) for m in mels])  # [N, f M]
        if x.shape[0] > self.max_fit_frames:
            rng = np.random.default_rng(self.seed + 1)
            x = x[np.sort(rng.choice(x.shape[0], self.max_fit_frames, replace=False))]
        self.centers, self.inertia = kmeans_fit(x, self.k, self.iters, self.seed, progress=progress)
        return self

    def encode(self, mel: np.ndarray) -> np.ndarray:
        self._check_fitted("encode")
        mel = self._check_mel(mel)
        if mel.shape[0] == 0:
            return np.zeros((0,), np.int32)
        return kmeans_assign(self._stack(self.stats.normalize(mel)), self.centers)[0]  # [T/f]

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        self._check_fitted("decode")
        tokens = np.asarray(tokens).reshape(-1)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.k):
            raise DataError(
                f"{self.name}.decode: token ids must be in [0, {self.k}), got "
                f"[{tokens.min()}, {tokens.max()}]"
            )
        z = self.decode_standardised(tokens)  # [T, f M]
        return self.from_standardised(z, self.frame_mean(z) if tokens.size else None)

    def frame_mean(self, z: np.ndarray) -> np.ndarray:
        """Standardised token vectors [T, f M] -> the mean of their frames [M] (the
        postfilter's utterance mean)."""
        return z.reshape(-1, self.mel_cfg.n_mels).mean(0)

    def from_standardised(self, z: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
        """Standardised token vectors [T, f M] -> log-mel [T f, M]: the global-variance
        postfilter around `mean` [M] (the utterance's frame mean; a stream passes the mean of
        its prefix), then the corpus statistics."""
        z = z.reshape(-1, self.mel_cfg.n_mels)  # [T f, M]
        if self.gv_scale != 1.0 and mean is not None:  # global-variance postfilter
            z = mean + self.gv_scale * (z - mean)
        return self.stats.denormalize(z)  # [T f, M]

    def decode_standardised(self, tokens: np.ndarray, conv: bool = True) -> np.ndarray:
        """tokens [T] -> standardised token vectors [T, f M]: centroids or the context
        decoder, plus the conv decoder's residual (`conv`); no postfilter."""
        if self.context_tables is None:
            z = self.centers[tokens]  # [T, f M]
        else:
            z = self.context_tables[
                np.arange(self.context_tables.shape[0]), self._context_ids(tokens)
            ].sum(1)  # [T, O, f M] -> [T, f M]
        if conv and self.conv_decoder is not None and tokens.size:
            z = z + token_decoder.apply(self.conv_decoder, tokens[None])[0]  # [T, f M]
        return z

    def decode_standardised_many(self, rows: list[np.ndarray], conv: bool = True) -> list:
        """`[decode_standardised(t, conv) for t in rows]` with the conv decoder of every row in
        one batch: rows padded with the outside id K, which the decoder treats as the zeros
        beyond a sequence's end, so a row's vectors are the ones it gets alone (tested).
        A streaming server decodes its rows' windows this way."""
        zs = [self.decode_standardised(np.asarray(t), conv=False) for t in rows]
        live = [i for i, t in enumerate(rows) if len(t)]
        if conv and self.conv_decoder is not None and live:
            ids = np.full((len(live), max(len(rows[i]) for i in live)), self.k, np.int64)
            for j, i in enumerate(live):
                ids[j, : len(rows[i])] = rows[i]
            res = token_decoder.apply(self.conv_decoder, ids)  # [R, T, f M]
            for j, i in enumerate(live):
                zs[i] = zs[i] + res[j, : len(rows[i])]
        return zs

    @property
    def lookahead_tokens(self) -> int:
        """W of the context decoder + L * (k // 2) of the conv decoder (its 'same' convolutions)."""
        r = 0
        if self.conv_decoder is not None:
            n, kk = self.conv_decoder["conv"].shape[:2]
            r = n * (kk // 2)
        return self.context_window + r

    # -- context decoder
    @property
    def context_window(self) -> int:
        """W of the context decoder (0: none, decoding is the centroid lookup)."""
        return 0 if self.context_tables is None else (self.context_tables.shape[0] - 1) // 2

    def _context_ids(self, tokens: np.ndarray, window: int | None = None) -> np.ndarray:
        """tokens [T] -> [T, 2W + 1]: the token at t + o for o = -W..W (K outside)."""
        w = self.context_window if window is None else window
        pad = np.concatenate([np.full(w, self.k), tokens, np.full(w, self.k)])
        return np.stack([pad[o : o + tokens.size] for o in range(2 * w + 1)], 1)

    def fit_context_decoder(
        self,
        mels: Sequence[np.ndarray],
        window: int = 1,
        ridge: float = 1.0,
        progress: bool = False,
    ) -> KMeansTokenizer:
        """Fits the context decoder (module docstring) on `mels`: the ridge solution of
        min_E sum_t |z_t - sum_o E_o[x_{t+o}]|^2 + ridge |E - E_prior|^2, with E_prior = the
        centroids for o = 0 and zeros elsewhere (so unseen tokens decode as before).
        `window=0` removes it. Memory: the float64 Gram matrix is [(2W + 1)(K + 1)]^2, i.e.
        75 MB for K = 1024, W = 1 and 1.6 GB for K = 2048, W = 3."""
        self._check_fitted("fit_context_decoder")
        if window < 0 or ridge <= 0:
            raise ConfigError(
                f"fit_context_decoder: window={window} (expected >= 0), "
                f"ridge={ridge} (expected > 0)"
            )
        if self.conv_decoder is not None:  # it models this decoder's residual: now stale
            log.warning(
                "tokenizer %r: refitting the context decoder drops its conv decoder "
                "(fit it again: python -m jaxtts.data.tokenizers fit-conv)",
                self.name,
            )
            self.conv_decoder, self.conv_fit = None, {}
        if window == 0:
            self.context_tables, self.context_ridge, self.context_fit = None, 0.0, {}
            return self
        from tqdm.auto import tqdm  # start-up: tqdm.auto 55 ms, only when fitting

        o_n, k1 = 2 * window + 1, self.k + 1
        n_feat = o_n * k1
        gram = np.zeros((n_feat, n_feat))  # X^T X of the one-hot design [N, O (K + 1)]
        xty = np.zeros((n_feat, self.centers.shape[1]))
        frames = 0
        for mel in tqdm(mels, desc="context decoder", disable=not progress, leave=False):
            mel = self._check_mel(mel)
            if mel.shape[0] == 0:
                continue
            z = self._stack(self.stats.normalize(mel))  # [T, f M]
            ids = kmeans_assign(z, self.centers)[0]
            cols = self._context_ids(ids, window) + np.arange(o_n) * k1  # [T, O] feature ids
            for a in range(o_n):
                np.add.at(xty, cols[:, a], z)
                for b in range(o_n):
                    np.add.at(gram, (cols[:, a], cols[:, b]), 1.0)
            frames += ids.size
        prior = np.zeros_like(xty)
        prior[window * k1 : window * k1 + self.k] = self.centers
        gram[np.diag_indices(n_feat)] += ridge
        tables = np.linalg.solve(gram, xty + ridge * prior)
        self.context_tables = tables.reshape(o_n, k1, -1).astype(np.float32)
        self.context_ridge = float(ridge)
        self.context_fit = {"utterances": len(mels), "tokens": int(frames)}
        return self

    def _state(self):
        fields = {
            "k": self.k,
            "iters": self.iters,
            "max_fit_frames": self.max_fit_frames,
            "seed": self.seed,
            "inertia": self.inertia,
            "frames": self.frames,
        }
        arrays = {"centers": self.centers, "mel_mean": self.stats.mean, "mel_std": self.stats.std}
        if self.context_tables is not None:
            fields.update(
                context_window=self.context_window,
                context_ridge=self.context_ridge,
                context_fit=self.context_fit,
            )
            arrays["context_tables"] = self.context_tables
        if self.gv_scale != 1.0:
            fields["gv_scale"] = self.gv_scale
        if self.conv_decoder is not None:
            fields["conv_fit"] = self.conv_fit
            arrays["conv_decoder"] = {k: v.astype(np.float16) for k, v in self.conv_decoder.items()}
        return fields, arrays

    @classmethod
    def _from_state(cls, meta: dict, arrays: dict, mel_cfg: MelConfig) -> KMeansTokenizer:
        tok = cls(
            meta["k"],
            mel_cfg,
            meta["name"],
            meta.get("iters", 25),
            meta.get("max_fit_frames", 400_000),
            meta.get("seed", 0),
            meta.get("frames", 1),
        )
        tok.centers = arrays["centers"].astype(np.float32)
        tok.stats = MelStats(arrays["mel_mean"], arrays["mel_std"])
        tok.inertia = meta.get("inertia", [])
        if "context_tables" in arrays:
            tables = arrays["context_tables"].astype(np.float32)
            if (
                tables.ndim != 3
                or tables.shape[0] % 2 != 1
                or tables.shape[1] != tok.k + 1
                or tables.shape[2] != tok.centers.shape[1]
            ):
                raise DataError(
                    f"tokenizer {tok.name!r}: context_tables.npy of shape "
                    f"{tables.shape}, expected [2W + 1, {tok.k + 1}, "
                    f"{tok.centers.shape[1]}]"
                )
            tok.context_tables = tables
            tok.context_ridge = float(meta.get("context_ridge", 0.0))
            tok.context_fit = meta.get("context_fit", {})
        if "conv_decoder" in arrays:
            tok.conv_decoder = token_decoder.check(
                arrays["conv_decoder"],
                tok.k,
                tok.centers.shape[1],
                f"tokenizer {tok.name!r}: conv_decoder.npz",
            )
            tok.conv_fit = meta.get("conv_fit", {})
        tok.gv_scale = float(meta.get("gv_scale", 1.0))
        if not tok.gv_scale > 0:
            raise DataError(f"tokenizer {tok.name!r}: gv_scale={tok.gv_scale}, expected > 0")
        return tok

    # -- conv decoder
    def fit_conv_decoder(
        self,
        mels: Sequence[np.ndarray],
        cfg=None,
        progress: bool = False,
        dev_mels: Sequence[np.ndarray] = (),
    ) -> KMeansTokenizer:
        """Trains the conv decoder (`jaxtts.data.token_decoder`) on `mels` as the residual of
        the current linear decoder (context tables, or centroids); `dev_mels` give the
        reported dev L1 / MSE of the standardised frames before and after."""
        self._check_fitted("fit_conv_decoder")
        cfg = cfg or token_decoder.ConvDecoderConfig()
        ids, res = self._residuals(mels, progress, "conv decoder targets")
        params, curve = token_decoder.fit(ids, res, self.k, cfg, progress=progress)
        self.conv_fit = {
            "config": dataclasses.asdict(cfg),
            "utterances": len(ids),
            "tokens": int(sum(len(i) for i in ids)),
            "train_mse_per_100": curve,
        }
        if dev_mels:
            d_ids, d_res = self._residuals(dev_mels, False, "")
            out = [token_decoder.apply(params, i[None])[0] for i in d_ids]
            lin = np.concatenate([r.ravel() for r in d_res])
            err = np.concatenate([(r - o).ravel() for r, o in zip(d_res, out, strict=True)])
            self.conv_fit["dev"] = {
                "utterances": len(d_ids),
                "l1_linear": float(np.abs(lin).mean()),
                "l1_conv": float(np.abs(err).mean()),
                "mse_linear": float((lin**2).mean()),
                "mse_conv": float((err**2).mean()),
            }
        self.conv_decoder = params
        return self

    def _residuals(self, mels, progress: bool, desc: str):
        """Token ids [T] and standardised frames minus the linear decode [T, f M] per mel."""
        from tqdm.auto import tqdm  # start-up: tqdm.auto 55 ms, only when fitting

        ids, res = [], []
        for mel in tqdm(mels, desc=desc, disable=not progress, leave=False):
            mel = self._check_mel(mel)
            if mel.shape[0] == 0:
                continue
            z = self._stack(self.stats.normalize(mel))  # [T, f M]
            x = kmeans_assign(z, self.centers)[0]
            base = self.decode_standardised(x, conv=False)  # [T, f M]
            ids.append(x.astype(np.int32))
            res.append((z - base).astype(np.float32))
        return ids, res


# ----------------------------------------------------------------------------- linear quantiser


class LinearMelQuantizer(SpeechTokenizer):
    """The MDM paper's linear quantiser of log-mel values (see module docstring)."""

    kind = "mel_quantizer"

    def __init__(
        self,
        levels: int = 100,
        mel_cfg: MelConfig = MelConfig(),
        name: str | None = None,
        lo: float | None = None,
        hi: float | None = None,
        percentiles: tuple[float, float] = (0.05, 99.95),
    ):
        if levels < 2:
            raise ConfigError(f"LinearMelQuantizer: levels={levels}, expected >= 2")
        super().__init__(name or f"melq{levels}", mel_cfg)
        self.levels = int(levels)
        self.lo, self.hi = lo, hi
        self.percentiles = tuple(percentiles)
        if lo is not None and hi is not None and not hi > lo:
            raise ConfigError(f"LinearMelQuantizer: hi={hi} must exceed lo={lo}")

    @property
    def vocab_size(self) -> int:
        return self.levels

    @property
    def fitted(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def step(self) -> float:
        return (self.hi - self.lo) / (self.levels - 1)

    def fit(self, mels: Sequence[np.ndarray], **_) -> LinearMelQuantizer:
        x = np.concatenate([self._check_mel(m).reshape(-1) for m in mels])
        lo, hi = np.percentile(x, self.percentiles)
        self.lo, self.hi = round(float(lo), 4), round(float(hi), 4)
        if not self.hi > self.lo:
            raise DataError(f"LinearMelQuantizer.fit: degenerate range lo={lo} hi={hi}")
        return self

    def encode(self, mel: np.ndarray) -> np.ndarray:
        self._check_fitted("encode")
        mel = self._check_mel(mel)
        q = np.round(
            (np.clip(mel, self.lo, self.hi) - self.lo) / (self.hi - self.lo) * (self.levels - 1)
        )
        return q.astype(np.int32)  # [T, M]

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        self._check_fitted("decode")
        q = np.asarray(tokens)
        if q.ndim != 2 or q.shape[1] != self.mel_cfg.n_mels:
            raise DataError(
                f"{self.name}.decode: tokens of shape {q.shape}, expected "
                f"[T, {self.mel_cfg.n_mels}]"
            )
        if q.size and (q.min() < 0 or q.max() >= self.levels):
            raise DataError(f"{self.name}.decode: levels must be in [0, {self.levels})")
        return (self.lo + q.astype(np.float64) * self.step).astype(np.float32)  # [T, M]

    def _state(self):
        return {
            "levels": self.levels,
            "lo": self.lo,
            "hi": self.hi,
            "percentiles": list(self.percentiles),
        }, {}

    @classmethod
    def _from_state(cls, meta, arrays, mel_cfg):
        return cls(
            meta["levels"],
            mel_cfg,
            meta["name"],
            meta["lo"],
            meta["hi"],
            tuple(meta.get("percentiles", (0.05, 99.95))),
        )


# ----------------------------------------------------------------------------- external


class ExternalTokens(SpeechTokenizer):
    """Tokens extracted elsewhere, read from `<corpus>/tokens/<name>/<id>.npy`.

    `frame_rate` must divide the mel frame rate (50 Hz -> 50, 25, 10 Hz tokens ...).
    """

    kind = "external"

    def __init__(
        self, name: str, vocab_size: int, frame_rate: float = 50.0, mel_cfg: MelConfig = MelConfig()
    ):
        super().__init__(name, mel_cfg)
        if vocab_size < 1:
            raise ConfigError(f"ExternalTokens {name!r}: vocab_size={vocab_size}, expected >= 1")
        ratio = mel_cfg.frame_rate / frame_rate
        if abs(ratio - round(ratio)) > 1e-6 or round(ratio) < 1:
            raise ConfigError(
                f"ExternalTokens {name!r}: frame_rate={frame_rate} Hz must divide "
                f"the mel frame rate {mel_cfg.frame_rate} Hz"
            )
        self._vocab, self._rate, self.repeat = int(vocab_size), float(frame_rate), round(ratio)
        self.centers: np.ndarray | None = None  # float32 [V, M] mean log-mel per token

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def frame_rate(self) -> float:
        return self._rate

    @property
    def fitted(self) -> bool:
        return self.centers is not None

    def fit(
        self, mels: Sequence[np.ndarray], tokens: Sequence[np.ndarray] | None = None, **_
    ) -> ExternalTokens:
        """Mean log-mel of every token id (frames aligned by the rate ratio)."""
        if tokens is None or len(tokens) != len(mels):
            raise DataError(f"ExternalTokens {self.name!r}.fit: needs tokens for every mel")
        m = self.mel_cfg.n_mels
        sums, counts = np.zeros((self._vocab, m), np.float64), np.zeros(self._vocab, np.float64)
        for mel, tok in zip(mels, tokens, strict=True):
            mel = self._check_mel(mel)
            tok = self._check_tokens(tok)
            frames = np.repeat(tok, self.repeat)[: mel.shape[0]]  # [T']
            np.add.at(sums, frames, mel[: frames.size])
            counts += np.bincount(frames, minlength=self._vocab)
        fill = sums.sum(0) / max(counts.sum(), 1)  # unseen tokens decode to the mean frame
        self.centers = np.where(
            counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], fill
        ).astype(np.float32)
        return self

    def _check_tokens(self, tok) -> np.ndarray:
        tok = np.asarray(tok).reshape(-1)
        if tok.size and (
            not np.issubdtype(tok.dtype, np.integer) or tok.min() < 0 or tok.max() >= self._vocab
        ):
            raise DataError(
                f"ExternalTokens {self.name!r}: ids must be integers in [0, {self._vocab})"
            )
        return tok.astype(np.int64)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        raise DataError(
            f"ExternalTokens {self.name!r}: cannot encode audio; extract the tokens "
            f"with the external model into tokens/{self.name}/<id>.npy"
        )

    def decode(self, tokens: np.ndarray) -> np.ndarray:
        if self.centers is None:
            raise DataError(f"ExternalTokens {self.name!r}: decode needs fit(mels, tokens) first")
        return np.repeat(self.centers[self._check_tokens(tokens)], self.repeat, axis=0)

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {"centers": self.centers} if self.centers is not None else {}
        for key, arr in arrays.items():
            np.save(directory / f"{key}.npy", arr)
        meta = {
            "kind": self.kind,
            "name": self.name,
            "mel_cfg": self.mel_cfg.to_dict(),
            "vocab_size": self._vocab,
            "frame_rate": self._rate,
            "arrays": sorted(arrays),
        }
        (directory / _META).write_text(json.dumps(meta, indent=1) + "\n")
        return directory

    @classmethod
    def _from_state(cls, meta, arrays, mel_cfg):
        tok = cls(meta["name"], meta["vocab_size"], meta["frame_rate"], mel_cfg)
        tok.centers = arrays.get("centers")
        return tok


# ----------------------------------------------------------------------------- registry

TOKENIZERS: dict[str, type[SpeechTokenizer]] = {
    "kmeans": KMeansTokenizer,
    "mel_quantizer": LinearMelQuantizer,
    "external": ExternalTokens,
}


def make_tokenizer(kind: str, **kw) -> SpeechTokenizer:
    """An unfitted tokenizer: make_tokenizer('kmeans', k=1024), ('mel_quantizer', levels=100),
    ('external', name='hubert', vocab_size=2048, frame_rate=50)."""
    if kind not in TOKENIZERS:
        raise ConfigError(f"tokenizer kind {kind!r}: expected one of {sorted(TOKENIZERS)}")
    return TOKENIZERS[kind](**kw)


def load_tokenizer(directory: str | os.PathLike) -> SpeechTokenizer:
    directory = Path(directory)
    path = directory / _META
    if not path.is_file():
        raise DataError(f"{path}: no saved tokenizer here (expected {_META})")
    try:
        meta = json.loads(path.read_text())
        kind = meta["kind"]
    except (json.JSONDecodeError, KeyError) as e:
        raise DataError(f"{path}: malformed tokenizer file ({e})") from None
    if kind not in TOKENIZERS:
        raise DataError(f"{path}: kind {kind!r}, expected one of {sorted(TOKENIZERS)}")
    arrays = {}
    for key in meta.get("arrays", []):
        f = directory / f"{key}.npy"
        if not f.is_file():
            raise DataError(f"{f}: array of tokenizer {meta.get('name')!r} missing")
        try:
            arrays[key] = np.load(f)
        except (ValueError, OSError, EOFError) as e:
            raise DataError(f"{f}: unreadable ({type(e).__name__}: {e})") from None
    for key in meta.get("bundles", []):
        f = directory / f"{key}.npz"
        if not f.is_file():
            raise DataError(f"{f}: arrays of tokenizer {meta.get('name')!r} missing")
        try:
            with np.load(f) as z:
                arrays[key] = {k: z[k] for k in z.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:  # truncated / not .npz
            raise DataError(f"{f}: unreadable ({type(e).__name__}: {e})") from None
    return TOKENIZERS[kind]._from_state(meta, arrays, MelConfig.from_dict(meta["mel_cfg"]))


# ----------------------------------------------------------------------------- extraction


def tokens_dir(corpus_dir: str | os.PathLike, name: str) -> Path:
    return Path(corpus_dir) / "tokens" / name


_STAMP = "tokenizer.sha256"


def _stamp_token_cache(tokenizer: SpeechTokenizer, out: Path) -> None:
    """Ties the cache folder to `tokenizer`: a folder stamped by another tokenizer of the same
    name (another fit, another tokenizer_dir) is emptied and re-extracted, never reused; an
    unstamped folder (written before stamps existed) is trusted and stamped."""
    fp = tokenizer.fingerprint()
    stamp = out / _STAMP
    old = stamp.read_text().strip() if stamp.is_file() else None
    if old is not None and old != fp:
        stale = list(out.glob("*.npy"))
        log.warning(
            "%s: tokens of another %r tokenizer (fingerprint %s..., this one %s...); "
            "re-extracting %d cached files",
            out,
            tokenizer.name,
            old[:12],
            fp[:12],
            len(stale),
        )
        for f in stale:
            f.unlink()
    if old != fp:
        tmp = out / f"{_STAMP}.{os.getpid()}.tmp"  # per process: runs may share a corpus
        tmp.write_text(fp + "\n")
        os.replace(tmp, stamp)


def extract_tokens(
    tokenizer: SpeechTokenizer,
    utts: Sequence,
    corpus_dir: str | os.PathLike,
    mels: Mapping[str, np.ndarray] | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> Path:
    """Writes `<corpus_dir>/tokens/<tokenizer.name>/<id>.npy` for every utterance (cached).

    Mels come from `mels[id]` when given, else from the utterance's audio file.
    """
    from tqdm.auto import tqdm  # start-up: tqdm.auto 55 ms, only when extracting

    out = tokens_dir(corpus_dir, tokenizer.name)
    out.mkdir(parents=True, exist_ok=True)
    _stamp_token_cache(tokenizer, out)
    todo = [u for u in utts if overwrite or not (out / f"{u.id}.npy").is_file()]

    def one(u) -> None:
        if mels is not None and u.id in mels:
            mel = mels[u.id]
        else:
            mel = log_mel(load_audio(u.path, tokenizer.mel_cfg.sample_rate), tokenizer.mel_cfg)
        tmp = out / f"{u.id}.{os.getpid()}.tmp.npy"  # per process: runs may share a corpus
        np.save(tmp, tokenizer.encode(mel))
        os.replace(tmp, out / f"{u.id}.npy")

    # threads: the FFTs and the jitted assignment release the GIL
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        for _ in tqdm(
            pool.map(one, todo),
            total=len(todo),
            desc=f"tokens {tokenizer.name}",
            disable=not progress or not todo,
            leave=False,
        ):
            pass
    return out


def load_tokens(
    corpus_dir: str | os.PathLike, name: str, ids: Sequence[str]
) -> dict[str, np.ndarray]:
    folder = tokens_dir(corpus_dir, name)
    out = {}
    for uid in ids:
        path = folder / f"{uid}.npy"
        if not path.is_file():
            raise DataError(f"{path}: speech tokens of {uid!r} not found (extract_tokens first)")
        out[uid] = np.load(path)
    return out


# ----------------------------------------------------------------------------- CLI


def fit_kmeans_tokenizer(
    train_utts: Sequence,
    k: int = 1024,
    frames: int = 1,
    context: int = 1,
    conv_steps: int = 0,
    progress: bool = True,
    dev_utts: Sequence = (),
) -> KMeansTokenizer:
    """Fits k-means (+ the context decoder of window `context`, + `conv_steps` of the conv
    decoder when > 0) on training `Utterance`s, as `train.py` does for `data.tokenizer='kmeans'`.

    k-means sees at most `max_fit_frames` token vectors: a corpus with more (the 16 h one) is
    fitted on every n-th training utterance, ~1.25x what it needs (mels cost minutes); the
    decoders see the same utterances.
    """
    tok = KMeansTokenizer(k, frames=frames)
    need_s = 1.25 * tok.max_fit_frames / tok.frame_rate
    total_s = sum(float(u.duration or 0.0) for u in train_utts)
    stride = max(1, int(total_s // need_s))
    mels = utterance_mels(list(train_utts)[::stride], tok.mel_cfg, progress, "log-mel (fit)")
    tok.fit(mels, progress=progress)
    tok.fit_context_decoder(mels, window=context, progress=progress)
    if conv_steps > 0:
        dev = utterance_mels(list(dev_utts), tok.mel_cfg, progress, "log-mel (dev)")
        cfg = token_decoder.ConvDecoderConfig(steps=conv_steps)
        tok.fit_conv_decoder(mels, cfg, progress=progress, dev_mels=dev)
    return tok


def fit_cli(argv: Sequence[str] | None = None) -> None:
    """`python -m jaxtts.data.tokenizers fit OUT --corpus C`: fits a k-means tokenizer (and its
    context and conv decoders) on C's training split and saves it in OUT."""
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.data.tokenizers fit", description=fit_cli.__doc__.split("\n")[0]
    )
    ap.add_argument("out", help="tokenizer folder to write")
    ap.add_argument("--corpus", required=True, help="corpus folder (its train and dev splits)")
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--frames", type=int, default=2, help="mel frames a token (2: 25 Hz)")
    ap.add_argument("--context", type=int, default=1, help="context decoder window W")
    ap.add_argument("--conv_steps", type=int, default=3000, help="0: no conv decoder")
    ap.add_argument("--gv_scale", type=float, default=1.0, help="postfilter (1 = off)")
    a = ap.parse_args(argv)
    if Path(a.out, _META).is_file():
        raise ConfigError(f"{a.out}: already holds a tokenizer; choose another folder")
    t0 = time.perf_counter()
    tok = fit_kmeans_tokenizer(
        read_split(a.corpus, "train"),
        a.k,
        a.frames,
        a.context,
        a.conv_steps,
        dev_utts=read_split(a.corpus, "dev")[:200],
    )
    tok.gv_scale = float(a.gv_scale)
    tok.save(a.out)
    print(f"{tok.name} fitted on {a.corpus} in {time.perf_counter() - t0:.0f} s; saved to {a.out}")


def fit_context_cli(argv: Sequence[str] | None = None) -> None:
    """`python -m jaxtts.data.tokenizers fit-context DIR [DIR ...] --corpus C`: fits the context
    decoder of the k-means tokenizer in DIR on C's training utterances and saves it there (and
    into every further DIR holding the same tokenizer: same fingerprint)."""
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.data.tokenizers fit-context",
        description=fit_context_cli.__doc__.split("\n")[0],
    )
    ap.add_argument("dirs", nargs="+", help="tokenizer folders (tokenizer.json)")
    ap.add_argument("--corpus", required=True, help="corpus folder (its train split)")
    ap.add_argument("--num", type=int, default=3000, help="training utterances (evenly spaced)")
    ap.add_argument("--window", type=int, default=1, help="W: neighbours on each side")
    ap.add_argument("--ridge", type=float, default=1.0)
    a = ap.parse_args(argv)
    toks = _same_kmeans_tokenizers(a.dirs, "context decoder")
    utts = read_split(a.corpus, "train")
    if a.num > 0:
        utts = utts[:: max(1, len(utts) // a.num)][: a.num]
    t0 = time.perf_counter()
    mels = utterance_mels(utts, toks[0].mel_cfg, desc="log-mel (context decoder)")
    toks[0].fit_context_decoder(mels, window=a.window, ridge=a.ridge, progress=True)
    for d in a.dirs:
        toks[0].save(d)
    print(
        f"context decoder W={a.window} ridge={a.ridge:g} fitted on {len(mels)} utterances "
        f"({toks[0].context_fit['tokens']} tokens) of {a.corpus} in "
        f"{time.perf_counter() - t0:.0f} s; saved to {', '.join(a.dirs)}"
    )


def fit_conv_cli(argv: Sequence[str] | None = None) -> None:
    """`python -m jaxtts.data.tokenizers fit-conv DIR [DIR ...] --corpus C`: trains the conv
    decoder (`jaxtts.data.token_decoder`) of the k-means tokenizer in DIR on C's training
    utterances, over its current linear decoder, reports the dev error before / after, and
    saves it there (and into every further DIR holding the same tokenizer)."""
    d = token_decoder.ConvDecoderConfig()
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.data.tokenizers fit-conv",
        description=fit_conv_cli.__doc__.split("\n")[0],
    )
    ap.add_argument("dirs", nargs="+", help="tokenizer folders (tokenizer.json)")
    ap.add_argument("--corpus", required=True, help="corpus folder (its train and dev splits)")
    ap.add_argument("--num", type=int, default=16000, help="training utterances (evenly spaced)")
    for f in dataclasses.fields(d):
        ap.add_argument(f"--{f.name}", type=type(getattr(d, f.name)), default=getattr(d, f.name))
    a = ap.parse_args(argv)
    toks = _same_kmeans_tokenizers(a.dirs, "conv decoder")
    utts = read_split(a.corpus, "train")
    if a.num > 0:
        utts = utts[:: max(1, len(utts) // a.num)][: a.num]
    dev = read_split(a.corpus, "dev")[:200]
    cfg = token_decoder.ConvDecoderConfig(
        **{f.name: getattr(a, f.name) for f in dataclasses.fields(d)}
    )
    t0 = time.perf_counter()
    mels = utterance_mels(utts, toks[0].mel_cfg, desc="log-mel (conv decoder)")
    dev_mels = utterance_mels(dev, toks[0].mel_cfg, desc="log-mel (dev)")
    toks[0].fit_conv_decoder(mels, cfg, progress=True, dev_mels=dev_mels)
    for folder in a.dirs:
        toks[0].save(folder)
    r = toks[0].conv_fit["dev"]
    print(
        f"conv decoder (C {cfg.width}, {cfg.layers} blocks, kernel {cfg.kernel}, {cfg.steps} "
        f"steps) trained on {len(mels)} utterances of {a.corpus} in "
        f"{time.perf_counter() - t0:.0f} s; dev ({r['utterances']} utterances) L1 "
        f"{r['l1_linear']:.4f} -> {r['l1_conv']:.4f}, MSE {r['mse_linear']:.4f} -> "
        f"{r['mse_conv']:.4f}; saved to {', '.join(a.dirs)}"
    )


def _same_kmeans_tokenizers(dirs: Sequence[str], what: str) -> list[KMeansTokenizer]:
    """Loads the tokenizers in `dirs`; a one-line error unless all are the same k-means one."""
    toks = [load_tokenizer(d) for d in dirs]
    if not isinstance(toks[0], KMeansTokenizer):
        raise ConfigError(
            f"{dirs[0]}: a {toks[0].kind!r} tokenizer; the {what} is for k-means tokenizers"
        )
    fp = toks[0].fingerprint()
    for d, t in zip(dirs[1:], toks[1:], strict=True):
        if t.fingerprint() != fp:
            raise ConfigError(
                f"{d}: not the same tokenizer as {dirs[0]} (fingerprints "
                f"{t.fingerprint()[:12]} vs {fp[:12]})"
            )
    return toks


def postfilter_cli(argv: Sequence[str] | None = None) -> None:
    """`python -m jaxtts.data.tokenizers postfilter DIR [DIR ...] --gv_scale S`: sets the
    global-variance postfilter of k-means tokenizer folders (1 = off): decoded standardised
    frames z become mean_t(z) + S (z - mean_t(z)) per utterance, undoing part of the
    over-smoothing of a least-squares decoder (the 'GV' postfilter of statistical parametric
    TTS). Decode-only: tokens and caches are unchanged."""
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.data.tokenizers postfilter",
        description=postfilter_cli.__doc__.split("\n")[0],
    )
    ap.add_argument("dirs", nargs="+", help="tokenizer folders (tokenizer.json)")
    ap.add_argument("--gv_scale", type=float, required=True, help="S > 0 (1 = off)")
    a = ap.parse_args(argv)
    if not a.gv_scale > 0:
        raise ConfigError(f"--gv_scale {a.gv_scale}: expected > 0 (1 = off)")
    toks = _same_kmeans_tokenizers(a.dirs, "postfilter")
    for folder, tok in zip(a.dirs, toks, strict=True):
        tok.gv_scale = float(a.gv_scale)
        tok.save(folder)
    print(f"gv_scale {a.gv_scale:g} set in {', '.join(a.dirs)}")


_COMMANDS = {
    "fit": fit_cli,
    "fit-context": fit_context_cli,
    "fit-conv": fit_conv_cli,
    "postfilter": postfilter_cli,
}


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in _COMMANDS:
        print(
            "usage: python -m jaxtts.data.tokenizers fit OUT --corpus C [--k K] [--frames F] "
            "[--context W] [--conv_steps S] [--gv_scale G]\n"
            "       python -m jaxtts.data.tokenizers fit-context DIR [DIR ...] --corpus C "
            "[--num N] [--window W] [--ridge R]\n"
            "       python -m jaxtts.data.tokenizers fit-conv DIR [DIR ...] --corpus C "
            "[--num N] [--steps S] [--width C] [--layers L] ...\n"
            "       python -m jaxtts.data.tokenizers postfilter DIR [DIR ...] --gv_scale S",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        _COMMANDS[argv[0]](argv[1:])
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
