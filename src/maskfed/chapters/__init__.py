"""The book's experiment chapters, one module each: ``findings(...)`` gathers what a chapter shows.

Each returns the chapter's named values (numbers, short verdict phrases, table frames, figure inputs)
computed from the studies (:mod:`maskfed.studies`) and the archive; the chapter glues the values in
one call (:func:`maskfed.book.glue_all`), shows the tables and figures, and writes its prose in
Markdown around them. Nothing here trains a model that the studies do not already train.
"""
