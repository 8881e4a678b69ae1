"""Small utilities with no model or TensorFlow knowledge: atomic files, the line formats of text
files, the Keras backend in use, headless plotting, and known noise kept off standard
error."""
