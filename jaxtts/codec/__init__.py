"""The learned speech tokenizer (`jaxtts.codec.model.MelCodec`) as a `SpeechTokenizer`.

    tok = load_tokenizer("pretrained/codec")          # a codec run, or any saved tokenizer
    codes = tok.encode(mel)                           # log-mel [T, M] -> int32 [ceil(T / 2)]
    mel = tok.decode(codes)                           # -> log-mel [2 S, M]
    rows = tok.decode_many([c1, c2])                  # one jitted call, rows as alone

A codec tokenizer folder is a codec run folder (`python train.py --config configs/codec.py:small
--workdir runs/codec`: config.json + checkpoints) or its export (`python -m jaxtts.codec export
runs/codec pretrained/codec`: config.json + params.msgpack, the CTC head dropped, and a
tokenizer.json of kind 'codec'). `load_tokenizer` reads those and, for any other kind, defers to
`jaxtts.data.tokenizers.load_tokenizer` (k-means, mel quantiser, external tokens), so callers
above this layer load every tokenizer with one function.

Lengths are bucketed (multiples of BUCKET frames) so a handful of jitted programs serve every
utterance; padded frames are masked, so a row gives what it gives alone. An odd frame count is
padded with its last frame (as the k-means tokenizer stacks frames).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from jaxtts.data.audio import MelConfig, MelStats
from jaxtts.data.tokenizers import SpeechTokenizer
from jaxtts.data.tokenizers import load_tokenizer as load_classic
from jaxtts.errors import ConfigError, DataError

__all__ = ["BUCKET", "CodecTokenizer", "codec_from_config", "export", "load_tokenizer"]

BUCKET = 64  # frames
_META = "tokenizer.json"


def codec_from_config(model_cfg, with_ctc: bool = False):
    """The `MelCodec` of a codec config's `model` section (the CTC head only `with_ctc`)."""
    from jaxtts.codec.model import MelCodec

    m = model_cfg
    return MelCodec(
        n_mels=int(m.n_mels),
        dim=int(m.dim),
        mlp_dim=int(m.mlp_dim),
        enc_layers=tuple(int(x) for x in m.enc_layers),
        dec_layers=tuple(int(x) for x in m.dec_layers),
        levels=tuple(int(x) for x in m.levels),
        stride=int(m.stride),
        kernel=int(m.kernel),
        num_phones=int(m.num_phones or 0) if with_ctc else 0,
        cond=bool(m.get("cond", False)),
    )


def _load(folder: Path):
    """(model, params without the CTC head, config) of a codec run folder or its export."""
    import jax

    from jaxtts.run_folder import RunFolder

    run = RunFolder(folder)
    config = run.read_config("codec")
    model = codec_from_config(config.model)
    shipped = run.params_file.is_file() and not run.checkpoints_dir.is_dir()
    full = model if shipped else codec_from_config(config.model, with_ctc=True)
    n, s = int(config.model.n_mels), int(config.model.stride)
    x, mask = np.zeros((1, 2 * s, n), np.float32), np.ones((1, 2 * s), np.float32)
    like = jax.eval_shape(full.init, jax.random.PRNGKey(0), x, mask)["params"]
    params, _ = run.load_params(like)
    params = {k: v for k, v in params.items() if not k.startswith("ctc_")}
    return model, params, config


class CodecTokenizer(SpeechTokenizer):
    """A trained `MelCodec` (see the module docstring)."""

    kind = "codec"

    def __init__(self, folder: str | os.PathLike):
        import jax

        from jaxtts.codec.model import voice

        self.folder = Path(folder)
        if not (self.folder / "config.json").is_file():
            raise ConfigError(
                f"codec tokenizer {self.folder}: no config.json there, expected a codec run folder "
                "(python train.py --config configs/codec.py:small --workdir <dir>)"
            )
        self.model, self.params, self.config = _load(self.folder)
        m = self.config.model
        super().__init__(str(m.get("name") or "codec"), MelConfig(**dict(m.mel)))
        if m.get("mel_stats") is None:
            raise ConfigError(f"{self.folder / 'config.json'}: model.mel_stats unset (not trained)")
        self.stats = MelStats(
            np.asarray(m.mel_stats.mean, np.float32), np.asarray(m.mel_stats.std, np.float32)
        )
        self.stride = int(m.stride)
        model = self.model

        def enc(p, mel, mask):
            return model.apply({"params": p}, mel, mask, method=type(model).encode_codes)

        def dec(p, codes, tmask, cond):
            return model.apply({"params": p}, codes, tmask, cond, method=type(model).decode_codes)

        self._enc, self._dec, self._voice = jax.jit(enc), jax.jit(dec), jax.jit(voice)

    # -- SpeechTokenizer
    @property
    def vocab_size(self) -> int:
        return int(np.prod(self.model.levels))

    @property
    def frame_rate(self) -> float:
        return self.mel_cfg.frame_rate / self.stride

    @property
    def lookahead_tokens(self) -> int:
        from jaxtts.codec.model import decoder_reach

        return decoder_reach(self.model.kernel, self.model.dec_layers, self.stride)

    def fit(self, mels, **kw):
        raise ConfigError(
            "a codec tokenizer is trained, not fitted: "
            "python train.py --config configs/codec.py:small --workdir <dir>"
        )

    def fingerprint(self) -> str:
        import jax

        h = hashlib.sha256(json.dumps(self.config.model.to_dict(), sort_keys=True).encode())
        for leaf in jax.tree.leaves(self.params):
            h.update(np.asarray(leaf, np.float32).tobytes())
        return h.hexdigest()

    def _frames(self, mel: np.ndarray) -> np.ndarray:
        mel = self._check_mel(mel)
        pad = -mel.shape[0] % self.stride
        return np.concatenate([mel, np.repeat(mel[-1:], pad, 0)]) if pad and len(mel) else mel

    def _padded(self, mels):
        lens = np.array([len(m) for m in mels])
        t = max(BUCKET, -(-int(lens.max()) // BUCKET) * BUCKET)
        x = np.zeros((len(mels), t, self.mel_cfg.n_mels), np.float32)  # [B, T, M]
        mask = np.zeros((len(mels), t), np.float32)
        for i, m in enumerate(mels):
            x[i, : len(m)] = self.stats.normalize(m)
            mask[i, : len(m)] = 1.0
        return x, mask, lens

    @property
    def conditioned(self) -> bool:
        """Whether `decode` takes the voice of a reference log-mel (`ref`)."""
        return bool(self.model.cond)

    def voices(self, refs) -> np.ndarray:
        """Reference log-mels [T_i, M] (a prompt of the speaker) -> voice vectors [B, 2M]."""
        refs = [self._check_mel(r) for r in refs]
        if any(len(r) == 0 for r in refs):
            raise DataError(f"{self.name}: an empty reference log-mel has no voice")
        x, mask, _ = self._padded(refs)
        return np.asarray(self._voice(x, mask))

    def encode_many(self, mels) -> list[np.ndarray]:
        """log-mels [T_i, M] -> int32 codes [ceil(T_i / stride)] each, one jitted call."""
        mels = [self._frames(m) for m in mels]
        if not mels:
            return []
        x, mask, lens = self._padded(mels)
        codes = np.asarray(self._enc(self.params, x, mask))  # [B, T / stride]
        return [codes[i, : n // self.stride].astype(np.int32) for i, n in enumerate(lens)]

    def encode(self, mel: np.ndarray) -> np.ndarray:
        return self.encode_many([mel])[0]

    def decode_many(self, rows, refs=None) -> list[np.ndarray]:
        """int codes [S_i] -> log-mel float32 [S_i stride, M] each, one jitted call. `refs`:
        a reference log-mel per row whose voice a conditioned codec decodes in (None: the
        corpus average voice; an unconditioned codec ignores them)."""
        rows = [np.asarray(r).reshape(-1) for r in rows]
        for r in rows:
            if r.size and (r.min() < 0 or r.max() >= self.vocab_size):
                raise DataError(
                    f"{self.name}.decode: token ids must be in [0, {self.vocab_size}), got "
                    f"[{r.min()}, {r.max()}]"
                )
        if not rows:
            return []
        lens = np.array([r.size for r in rows])
        b = BUCKET // self.stride
        s = max(b, -(-int(lens.max()) // b) * b)
        codes = np.zeros((len(rows), s), np.int32)
        tmask = np.zeros((len(rows), s), np.float32)
        for i, r in enumerate(rows):
            codes[i, : r.size] = r
            tmask[i, : r.size] = 1.0
        cond = np.zeros((len(rows), 2 * self.mel_cfg.n_mels), np.float32)  # [B, 2M]
        if refs is not None and self.conditioned:
            if len(refs) != len(rows):
                raise DataError(f"{self.name}.decode_many: {len(refs)} refs for {len(rows)} rows")
            cond = self.voices(refs)
        z = np.asarray(self._dec(self.params, codes, tmask, cond))  # [B, S stride, M]
        return [self.stats.denormalize(z[i, : n * self.stride]) for i, n in enumerate(lens)]

    def decode(self, tokens: np.ndarray, ref: np.ndarray | None = None) -> np.ndarray:
        return self.decode_many([tokens], None if ref is None else [ref])[0]

    def save(self, directory: str | os.PathLike) -> Path:
        export(self.folder, directory)
        return Path(directory)


def export(src: str | os.PathLike, dest: str | os.PathLike, dtype: str = "float16") -> int:
    """Ships a codec run: its config, the encoder + decoder parameters alone (one params file,
    `dtype`; the CTC head dropped) and a tokenizer.json of kind 'codec'. Returns the file's size."""
    from jaxtts import checkpoint as ckpt_lib
    from jaxtts.run_folder import RunFolder

    src, out = Path(src), Path(dest)
    _, params, config = _load(src)
    out.mkdir(parents=True, exist_ok=True)
    if src.resolve() != out.resolve():
        (out / "config.json").write_text(RunFolder(src).config_path.read_text())
    n = ckpt_lib.write_params_file(out / "params.msgpack", params, dtype)
    m = config.model
    meta = {"kind": "codec", "name": str(m.get("name") or "codec"), "mel_cfg": dict(m.mel)}
    (out / _META).write_text(json.dumps(meta, indent=1) + "\n")
    return n


def _json_field(path: Path, key: str):
    """`key` of a JSON file (None when the file is absent); malformed: one-line DataError."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text()).get(key)
    except (json.JSONDecodeError, AttributeError) as e:
        raise DataError(f"{path}: malformed JSON ({e})") from None


def load_tokenizer(directory: str | os.PathLike) -> SpeechTokenizer:
    """Any saved tokenizer: a codec (run folder or export) or a `jaxtts.data.tokenizers` kind
    (whose loader's one-line error names a missing tokenizer.json)."""
    directory = Path(directory)
    kind = _json_field(directory / _META, "kind")
    if kind == "codec" or (
        kind is None and _json_field(directory / "config.json", "task") == "codec"
    ):
        return CodecTokenizer(directory)
    return load_classic(directory)
