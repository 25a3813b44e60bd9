"""`tuneup doctor`: what this node offers training, checked, with the fix for each problem."""
