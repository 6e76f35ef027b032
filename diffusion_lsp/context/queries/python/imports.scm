; Module paths a file imports; their last parts are matched against other open files' names.
(import_statement name: (dotted_name) @module)
(import_statement name: (aliased_import name: (dotted_name) @module))
(import_from_statement module_name: (_) @module)
(import_from_statement name: (dotted_name) @module)
(import_from_statement name: (aliased_import name: (dotted_name) @module))
