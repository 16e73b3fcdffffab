# Guest image targets (filled in by images/).
images:
