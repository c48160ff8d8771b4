"""`retarget demo`: real DP-SGD models (Opacus, scikit-learn's digits) through the service."""
