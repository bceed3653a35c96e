"""Text: tokenisation, vocabularies, tf-idf, stemming, concept vocabularies."""
