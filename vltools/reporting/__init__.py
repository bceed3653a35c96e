"""Looking at results: training curves (`plot`), the static HTML gallery (`report`), and the distinct-captions
cells of the examples' printed tables (`tables`)."""
