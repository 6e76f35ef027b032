; Syntactic units the prefix may start at: top-level statements and (decorated) definitions.
(module (_) @unit)
(decorated_definition) @unit
(function_definition) @unit
(class_definition) @unit
