(program (_) @unit)
(class_body (_) @unit)
(function_declaration) @unit
