"""Certified duality gaps (34) for any candidate: :func:`gtvmodel.certify`
(:mod:`~gtvmodel.certificates.certificate`).
"""
