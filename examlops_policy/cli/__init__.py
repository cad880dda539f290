"""The ``exa`` command line: one optional layer over the library."""
