"""Decoding: sampling (`sampling.py`), the generic while_loop driver and the Strategy
interface (`driver.py`), decode options from config (`options.py`), strategies by name
(`registry.py`). Strategies themselves live with their method (`jaxtts.methods.<m>`)."""
