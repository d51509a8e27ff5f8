"""The most characters one CSV field may hold when a stage reads a table back, set once for the
csv module on import (stages.lib.io and stages.lib.data.rows import it). Python's csv reader
refuses a field over 131,072 characters by default: about 2,000 boxes in detection's `boxes` column.
Ingest caps an image's boxes (validate.max_boxes, at most 100,000: about 10 MB) and refuses an
annotation field over this limit, so every manifest it writes reads back, and one row's memory
stays bounded. Only the standard library here."""
import csv

FIELD_LIMIT = 64 << 20
csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))
