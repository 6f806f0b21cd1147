"""The supervisor: worker pool, worker RPC, gRPC services, tenants, metrics, CLI entry points."""
