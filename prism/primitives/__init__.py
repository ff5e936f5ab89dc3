"""Demand primitives: spectral periods, the primitive dictionary, structural parts, and the
decomposition that puts them together (:func:`prism.primitives.decompose.decompose`)."""
