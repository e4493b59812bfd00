"""Renders saved results: the README's tables and the plots, from results/<gpu>/.

Imports from measure/ (the reference rows' file, the roofline model) and results/ only.
"""
