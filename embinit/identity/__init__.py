"""Identity: what makes each output what it is. Every digest (a run's spec, the training code, a report's code, an
extension's or layer's code fingerprint), the records kept beside outputs, and the proofs that older code trains alike.
"""
