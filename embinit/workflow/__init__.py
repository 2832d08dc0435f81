"""The workflow's Python (rules/*.smk call it; it calls the stages' packages): every artifact's path template, the
run and layer sheets with each job's inputs and spec, which outputs are stale, and the packs of a cluster run.
Nothing here writes a file while the DAG is built: a dry run leaves the tree as it found it."""
