"""Pure privacy accounting: numpy, scipy and dp_accounting; no I/O."""
