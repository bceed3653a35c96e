"""Looking at results: training curves (`plot`) and the static HTML gallery (`report`)."""
