"""jaxtts: fast, robust autoregressive text-to-speech in JAX/Flax."""

__version__ = "0.1.0"
