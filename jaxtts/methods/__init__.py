"""One place per model family: model, task (data + loss + train), decoding strategies, engine.
See the README's "method -> files" table."""
