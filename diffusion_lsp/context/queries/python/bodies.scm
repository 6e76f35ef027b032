; Bodies that a multi-line (BLOCK) completion fills when they are empty.
(block) @body
