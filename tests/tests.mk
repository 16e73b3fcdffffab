# Test targets (filled in by tests/).
test: deps all images
