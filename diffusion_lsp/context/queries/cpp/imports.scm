(preproc_include path: (string_literal) @module)
(preproc_include path: (system_lib_string) @module)
