"""Support code for the runtimes: compiler wrappers (compiler_cpu.py) and ctypes glue to system libraries."""
