"""Code generators and runtimes, one package per target: `sw26010` (simulated) and `host` (LLVM JIT)."""
