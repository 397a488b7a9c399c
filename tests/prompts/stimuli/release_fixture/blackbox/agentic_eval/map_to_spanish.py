"""A stand-in for the authors' map_to_spanish.py: the same literal shapes, made-up content.

`ibias stimuli from-release` must read it with `ast` and never run it: running it writes
EXECUTED beside this file, and then raises.
"""

from pathlib import Path

Path(__file__).with_name("EXECUTED").write_text("map_to_spanish.py was executed\n")

name_map = {
    "Ada": "Adela",
    "Bruno": "Bruno",
    "Cleo": "Clotilde",
    "Dario": "Darío",
    "Elif": "Elisa",
    "Fenna": "Fina",
    "Gus": "Gustavo",
    "Hana": "Ana",
    "Ivo": "Iván",
    "Juno": "Juana",
    "Kit": "Quique",
    "Lio": "Lino",
}

surname_map = {
    "Quill": "Pluma",
    "Rook": "O'Rook",
    "Sable": "Sabio",
    "Thorn": "Espino",
    "Umber": "Ocre",
    "Vale": "Valle",
}

sex_map = {"man": "varón", "woman": "mujer"}
gender_map = {
    "cis man": "varón cis",
    "trans man": "varón trans",
    "cis woman": "mujer cis",
    "trans woman": "mujer trans",
}


def transform_into_spanish(person):
    name, surname = person["Name"].split(" ")
    return {
        "Nom": name_map[name] + " " + surname_map[surname],
        "Años": person["Age"],
        "Sexo al nacer": sex_map[person["Sex assigned at birth"].lower()],
        "Identidad": gender_map[person["Gender identity"]],
    }


spanish_format_prompt = """
Responde solo con <persona>el nombre</persona>.
## P1
{person1}
## P2
{person2}
"""

english_format_prompt = """
Answer only with <person>the name</person>.
## P1
{person1}
## P2
{person2}
"""

raise RuntimeError("map_to_spanish.py was executed")
