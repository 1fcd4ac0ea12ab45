"""Stage 9 of the pipeline: running kernels. realize.py lowers scheduled ExecItems to runners and runs them."""
