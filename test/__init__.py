"""fusegrad test suite (a package so `python -m test.fuzz` finds this folder before the standard library's `test`)."""
