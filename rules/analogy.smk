# Table 4: 3CosAdd word analogy on a block's pre-trained (GloVe) layer under the paper's seven transformations.


rule table4:
    input:
        vectors=pretrained_path(config["table4"]["block"], config["table4"]["side"]),
        tokens=pretrained_path(config["table4"]["block"], config["table4"]["side"]).replace(".npy", ".parquet"),
        questions=raw(config["table4"]["questions"]),
    output:
        csv=report(f"{RES}/table4.csv", caption="../report/table4.rst", category="Tables"),
        md=f"{RES}/table4.md",
    params:
        settings=json.dumps(config["table4"], sort_keys=True),  # a changed block, side or seed reruns it
        pos=[config["model"]["max_len"], config["model"]["pos_base"]],
    resources:
        mem_mb=4000,
    conda:
        PIPELINE_ENV
    script:
        "../workflow_scripts/analogy.py"
