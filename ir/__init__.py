"""The tile IR: low-precision data types, programs, their builder, verifier and NumPy interpreter."""
