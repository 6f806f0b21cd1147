"""Fuzzing the untrusted inputs with hypothesis: worker frames, KServe requests, the HTTP/2
transport, package intake and config.pbtxt. A short run in CI; `scripts/fuzz.sh` is the
long mode (FUZZ_EXAMPLES inputs per target)."""
