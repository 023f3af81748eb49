"""Analysis of start-up traces: readers turn files into plain records, pure functions turn
records into a breakdown and findings, renderers write text. Nothing here touches torch,
the network or the OS beyond reading the file it is given."""
