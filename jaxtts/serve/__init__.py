"""An HTTP server for one shipped model: streamed speech in the shape of OpenAI's
`/v1/audio/speech`, on the loopback interface (FastAPI + uvicorn). Three parts:

- `jaxtts.serve.scheduler`: `Scheduler` owns the model, the request queue, the slots of
  continuous batching, the device thread (prefill + decode) and the audio thread (tokens ->
  audio), and knows nothing of HTTP;
- `jaxtts.serve.app`: `create_app(scheduler)`, the FastAPI app with pydantic request and
  response models and one-line JSON errors;
- `jaxtts.serve.cli`: `python -m jaxtts.serve --workdir pretrained/car_small --port 8000`, and
  `LiveServer` (the app on a free port in a thread).

    python -m jaxtts.serve --workdir pretrained/car_small --port 8000
    curl -s localhost:8000/v1/audio/speech -H 'content-type: application/json' \\
        -d '{"input": "Where did you put the keys?", "voice": "spk03"}' -o keys.wav
"""

from jaxtts.serve.app import create_app, pcm16, wav_header
from jaxtts.serve.cli import LiveServer, main
from jaxtts.serve.scheduler import DONE, Job, Scheduler, ServeError

__all__ = [
    "DONE",
    "Job",
    "LiveServer",
    "Scheduler",
    "ServeError",
    "create_app",
    "main",
    "pcm16",
    "wav_header",
]
