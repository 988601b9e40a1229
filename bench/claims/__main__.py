"""`python -m bench.claims [--update]`: check or rewrite every quoted span."""

from bench.claims import main

main()
