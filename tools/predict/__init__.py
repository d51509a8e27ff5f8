"""`python -m tools.predict`: batch prediction with the exported model (__main__.py), its
inputs (inputs.py), its output file (rowfile.py), the rows of a batch (rows.py) and the same
rows on a Ray cluster (ray.py)."""
