"""Reports people read: HTML (and PDF) pages built from evaluation and planning frames."""
