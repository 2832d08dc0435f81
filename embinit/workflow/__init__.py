"""The workflow's Python (rules/*.smk call it; it calls the stages): the config and its checks, the run sheet, the
outputs and registries' extensions, each job's path and spec, which outputs are stale, and the packs of a cluster run.
Nothing here writes a file while the DAG is built: a dry run leaves the tree as it found it."""
