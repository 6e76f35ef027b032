(import_statement source: (string (string_fragment) @module))
(export_statement source: (string (string_fragment) @module))
((call_expression
   function: (identifier) @_require
   arguments: (arguments (string (string_fragment) @module)))
 (#eq? @_require "require"))
