"""Stage 8 runtimes: one `ops_<name>.py` per device (CPU, NULL, PYTHON), each defining `<Name>Device(Compiled)`.

`fusegrad.device.Device[name]` imports the module on first use; support/ holds compiler wrappers and ctypes glue.
"""
