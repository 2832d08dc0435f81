# Table 4: 3CosAdd word analogy on a block's pre-trained (GloVe) layer under the paper's seven transformations,
# and (beyond the paper) the same table for several numbers of rows of P drawn from.

T4_LAYER = pretrained_path(config["table4"]["block"], config["table4"]["side"])


rule table4:
    input:
        vectors=T4_LAYER,
        tokens=T4_LAYER.replace(".npy", ".parquet"),
        questions=raw(config["table4"]["questions"]),
    output:
        csv=report(f"{RES}/table4.csv", caption="../report/table4.rst", category="Tables"),
        md=f"{RES}/table4.md",
    conda:
        PIPELINE_ENV
    resources:
        mem_mb=4000,
    params:
        settings=json.dumps(config["table4"], sort_keys=True),  # a changed seed, pos_enc or pos_rows reruns it
        pos_base=config["model"]["pos_base"],
    script:
        "../workflow_scripts/analogy.py"


rule table4_sensitivity:
    input:
        vectors=T4_LAYER,
        tokens=T4_LAYER.replace(".npy", ".parquet"),
        questions=raw(config["table4"]["questions"]),
    output:
        csv=report(f"{RES}/table4_sensitivity.csv", caption="../report/table4_sensitivity.rst", category="Tables"),
        md=f"{RES}/table4_sensitivity.md",
    conda:
        PIPELINE_ENV
    resources:
        mem_mb=4000,
    params:
        settings=json.dumps(config["table4"], sort_keys=True),  # a changed sensitivity_rows reruns it
        pos_base=config["model"]["pos_base"],
    script:
        "../workflow_scripts/analogy.py"
