"""Settings for the whole test process, made before any test module imports grpc."""
import os

# Many tests fork this process (confined children, the zygote) after gRPC clients have run
# in it; with fork support on, gRPC restarts its thread pools in every forked child, which
# then holds threads the test did not start (and fails to start them under a pids limit).
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
