"""Error types. Every message is one line naming the file/field and what was expected."""


class JaxttsError(Exception):
    """Base class for all errors raised on bad user input or environment."""


class ConfigError(JaxttsError, ValueError):
    """A config key is unknown, missing or has a bad value."""


class DataError(JaxttsError, ValueError):
    """A manifest, dataset folder or record is malformed or points at missing files."""


class AudioError(DataError):
    """Audio is unreadable, corrupt, empty or has the wrong sample rate / channel count."""


class TextError(DataError):
    """Text is empty or yields no pronounceable symbols."""


class CheckpointError(JaxttsError):
    """A checkpoint is missing or does not match the config."""


class MissingDependencyError(JaxttsError, RuntimeError):
    """An external program or optional package (espeak-ng, pocketsphinx, ...) is absent."""
