r"""Synthesize speech with a trained jaxtts model.

  python infer.py --workdir runs/car --text "Hello there." --speaker spk03 --out_dir out/
  python infer.py --workdir runs/car --text_file lines.txt --strategy car:3 --batch_size 16 \
      --speaker_wav me.wav --speaker_text "what I said in me.wav" --out_dir out/

Writes one wav per input line (`<out_dir>/<line index:04d>.wav`) and `results.jsonl` with the
text, duration, decoding steps, wall time and RTF of every line (skipped lines say why).
`--stream` writes each wav while it decodes, chunk by chunk (time to first audio in
results.jsonl).
"""

from absl import flags

from jaxtts import cli
from jaxtts.decode import registry

_WORKDIR = flags.DEFINE_string("workdir", None, "Training run folder (config + checkpoints).")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint",
    None,
    "A checkpoint step folder <workdir>/checkpoints/<step> (instead of "
    "--workdir, which takes the latest).",
)
_TEXT = flags.DEFINE_multi_string("text", [], "Text to synthesize (repeatable).")
_TEXT_FILE = flags.DEFINE_string("text_file", None, "File with one utterance per line.")
_SPEAKER = flags.DEFINE_string("speaker", None, "Corpus utterance id or speaker name as prompt.")
_SPEAKER_WAV = flags.DEFINE_string("speaker_wav", None, "Prompt audio of the target speaker.")
_SPEAKER_TEXT = flags.DEFINE_string("speaker_text", None, "Transcript of --speaker_wav.")
_STRATEGY = flags.DEFINE_string(
    "strategy",
    None,
    "Decoding strategy the run folder offers (default: the run's config.decode.strategy; a "
    "strategy the run does not offer is a one-line error listing those it does): "
    + "; ".join(f"{n} [{f}]" for n, f in registry.syntax_by_family()),
)
_BATCH = flags.DEFINE_integer("batch_size", 8, "Rows decoded together.")
_OUT = flags.DEFINE_string("out_dir", "out/infer", "Output folder.")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed (per line: (seed, line index)).")
_TEMP = flags.DEFINE_float("temperature", None, "Sampling temperature.")
_TOP_K = flags.DEFINE_integer("top_k", None, "Top-k sampling (0 = off).")
_TOP_P = flags.DEFINE_float("top_p", None, "Nucleus sampling mass (1 = off).")
_PRECISION = flags.DEFINE_enum(
    "precision",
    None,
    ["float32", "bfloat16"],
    "Matmul precision of LM-family decoding (bfloat16: weights and matmul inputs in bfloat16, "
    "float32 sums; default: the run's decode config, float32).",
)
_GREEDY = flags.DEFINE_bool("greedy", None, "Greedy decoding.")
_MAX_SECONDS = flags.DEFINE_float("max_seconds", None, "Length cap per piece of text.")
_STREAM = flags.DEFINE_bool(
    "stream",
    False,
    "Write each wav chunk by chunk while it decodes (step-wise strategies; one line at a "
    "time; jaxtts/stream.py); results.jsonl records the time to first audio.",
)


_VOCODER = flags.DEFINE_string(
    "vocoder",
    None,
    "griffin_lim, vocos (pretrained/vocoder) or a vocoder run folder (default: the library's).",
)
_STRICT = flags.DEFINE_bool(
    "strict",
    False,
    "Text an English model will not say as written (another script, markup, bare digits) is "
    "an error instead of a warning.",
)


def main(argv):
    from jaxtts.synthesize import run_infer

    if len(argv) > 1:
        raise flags.Error(f"unexpected arguments: {argv[1:]}")
    run_infer(
        workdir=_WORKDIR.value,
        checkpoint=_CHECKPOINT.value,
        texts=_TEXT.value,
        text_file=_TEXT_FILE.value,
        speaker=_SPEAKER.value,
        speaker_wav=_SPEAKER_WAV.value,
        speaker_text=_SPEAKER_TEXT.value,
        strategy=_STRATEGY.value,
        batch_size=_BATCH.value,
        out_dir=_OUT.value,
        seed=_SEED.value,
        temperature=_TEMP.value,
        top_k=_TOP_K.value,
        top_p=_TOP_P.value,
        precision=_PRECISION.value,
        greedy=_GREEDY.value,
        max_seconds=_MAX_SECONDS.value,
        stream=_STREAM.value,
        strict=_STRICT.value,
        **({"vocoder": _VOCODER.value} if _VOCODER.value else {}),
    )


if __name__ == "__main__":
    cli.run(main)
