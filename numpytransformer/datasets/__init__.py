"""Data sets and generators: reversal, an embedded translation pair, Multi30K, IMDB."""
