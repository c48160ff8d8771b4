"""Model file formats: reading and checking safetensors files, streaming files.

Below the registry and the merge methods, which both read model files and must not
import each other."""
